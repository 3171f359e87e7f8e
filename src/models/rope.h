// RoPE inverse frequencies for the rope_scaling types HF configs use.
#pragma once

#include <vector>

#include "models/config.h"

namespace pagoda {

// inv_freq[i] = 1 / theta^(2i / rot_dim) for i < rot_dim / 2, then adjusted
// by the scaling type: "linear" divides by factor; "llama3" divides the low
// frequencies by factor and blends the band between (as HF's
// _compute_llama3_parameters); "yarn" / "deepseek_yarn" keep the dims
// below the correction range, divide those above it by factor and ramp
// linearly between (spec §0.3, HF's _compute_yarn_parameters):
//   inv_freq[i] = f_i * (1 - ramp_i) + f_i / factor * ramp_i,
//   ramp_i = clamp((i - lo) / (hi - lo), 0, 1).
std::vector<float> rope_inv_freq(const RopeScaling& scaling, double theta, int rot_dim);

// YaRN's correction range [lo, hi] in pair indices: with
//   corr(n) = rot_dim * ln(L0 / (n * 2 pi)) / (2 ln theta)
// (the pair that turns n times over the original context L0),
// lo = max(floor(corr(beta_fast)), 0), hi = min(ceil(corr(beta_slow)),
// rot_dim - 1), and hi = lo + 0.001 if they meet.
struct YarnRange {
  double lo = 0, hi = 0;
};
YarnRange yarn_correction_range(const RopeScaling& scaling, double theta, int rot_dim);

// 0.1 * mscale * ln(scale) + 1, or 1 when scale <= 1 (DeepSeek's and HF's
// yarn_get_mscale).
double yarn_get_mscale(double scale, double mscale = 1.0);

// The factor YaRN multiplies cos and sin by (HF's attention_factor, vLLM's
// mscale): the configured attention_factor if any, else
// yarn_get_mscale(factor, mscale) / yarn_get_mscale(factor, mscale_all_dim)
// when both are set (DeepSeek: mscale == mscale_all_dim, so 1), else
// yarn_get_mscale(factor). 1 for the other scaling types. Multiplying q's
// and k's rotated parts by it scales their dot products by its square.
double rope_attention_factor(const RopeScaling& scaling);

// The factor DeepSeek V2/V3 attention multiplies its softmax scale
// (qk_head_dim^-0.5) by: yarn_get_mscale(factor, mscale_all_dim)^2 when the
// config sets mscale_all_dim (HF DeepseekV3Attention, vLLM), else 1.
// Real V3: yarn_get_mscale(40, 1)^2 = 1.36889^2 = 1.87385 (spec §0.3).
double yarn_softmax_scale_factor(const RopeScaling& scaling);

}  // namespace pagoda
