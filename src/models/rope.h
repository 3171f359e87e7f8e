// RoPE inverse frequencies for the rope_scaling types HF configs use.
#pragma once

#include <vector>

#include "models/config.h"

namespace pagoda {

// inv_freq[i] = 1 / theta^(2i / rot_dim) for i < rot_dim / 2, then adjusted
// by the scaling type: "linear" divides by factor; "llama3" divides the low
// frequencies by factor and blends the band between (as HF's
// _compute_llama3_parameters).
std::vector<float> rope_inv_freq(const RopeScaling& scaling, double theta, int rot_dim);

}  // namespace pagoda
