#include "models/rope.h"

#include <cmath>
#include <numbers>

#include "core/error.h"

namespace pagoda {

std::vector<float> rope_inv_freq(const RopeScaling& scaling, double theta, int rot_dim) {
  std::vector<float> inv_freq(rot_dim / 2);
  for (int i = 0; i < rot_dim / 2; ++i) {
    // HF computes the exponent and power in f32; doing the same keeps the
    // angles bit-close to the reference implementation.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(rot_dim);
    inv_freq[i] = 1.0f / std::pow(static_cast<float>(theta), exponent);
  }
  if (scaling.type == "default") return inv_freq;
  if (scaling.type == "linear") {
    for (float& f : inv_freq) f = static_cast<float>(f / scaling.factor);
    return inv_freq;
  }
  if (scaling.type == "llama3") {
    const double old_len = static_cast<double>(scaling.original_max_position_embeddings);
    const double low_freq_wavelen = old_len / scaling.low_freq_factor;
    const double high_freq_wavelen = old_len / scaling.high_freq_factor;
    for (float& f : inv_freq) {
      const double wavelen = 2.0 * std::numbers::pi / f;
      if (wavelen < high_freq_wavelen) continue;  // high frequencies: unchanged
      if (wavelen > low_freq_wavelen) {
        f = static_cast<float>(f / scaling.factor);
        continue;
      }
      const double smooth = (old_len / wavelen - scaling.low_freq_factor) /
                            (scaling.high_freq_factor - scaling.low_freq_factor);
      f = static_cast<float>((1.0 - smooth) * f / scaling.factor + smooth * f);
    }
    return inv_freq;
  }
  throw InputError("unsupported rope_scaling type '" + scaling.type + "'");
}

}  // namespace pagoda
