#include "models/rope.h"

#include <algorithm>
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
  if (scaling.is_yarn()) {
    const YarnRange range = yarn_correction_range(scaling, theta, rot_dim);
    const auto factor = static_cast<float>(scaling.factor);
    for (int i = 0; i < rot_dim / 2; ++i) {
      // In f32 like HF (1 / (factor * theta^e) for the interpolated end);
      // the ramp from the range computed in double like HF's Python floats.
      const float exponent = static_cast<float>(2 * i) / static_cast<float>(rot_dim);
      const float pos_freq = std::pow(static_cast<float>(theta), exponent);
      const float extrapolation = inv_freq[i], interpolation = 1.0f / (factor * pos_freq);
      const auto ramp = static_cast<float>(
          std::clamp((static_cast<double>(i) - range.lo) / (range.hi - range.lo), 0.0, 1.0));
      inv_freq[i] = interpolation * ramp + extrapolation * (1.0f - ramp);
    }
    return inv_freq;
  }
  throw InputError("unsupported rope_scaling type '" + scaling.type + "'");
}

YarnRange yarn_correction_range(const RopeScaling& scaling, double theta, int rot_dim) {
  const double l0 = static_cast<double>(scaling.original_max_position_embeddings);
  auto corr = [&](double rotations) {
    return rot_dim * std::log(l0 / (rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(theta));
  };
  YarnRange r;
  r.lo = std::max(std::floor(corr(scaling.beta_fast)), 0.0);
  r.hi = std::min(std::ceil(corr(scaling.beta_slow)), static_cast<double>(rot_dim - 1));
  if (r.lo == r.hi) r.hi += 0.001;  // the ramp divides by hi - lo
  return r;
}

double yarn_get_mscale(double scale, double mscale) {
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

double rope_attention_factor(const RopeScaling& scaling) {
  if (!scaling.is_yarn()) return 1.0;
  if (scaling.attention_factor > 0) return scaling.attention_factor;
  if (scaling.mscale != 0 && scaling.mscale_all_dim != 0) {
    return yarn_get_mscale(scaling.factor, scaling.mscale) /
           yarn_get_mscale(scaling.factor, scaling.mscale_all_dim);
  }
  return yarn_get_mscale(scaling.factor);
}

double yarn_softmax_scale_factor(const RopeScaling& scaling) {
  if (!scaling.is_yarn() || scaling.mscale_all_dim == 0) return 1.0;
  const double m = yarn_get_mscale(scaling.factor, scaling.mscale_all_dim);
  return m * m;
}

}  // namespace pagoda
