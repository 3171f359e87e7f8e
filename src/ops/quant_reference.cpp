// Scalar twins of the int8 ops (ops/quant.h), written from the formulas in
// that header with 64-bit integer sums, independent of the kernel code.
#include <cmath>
#include <cstdint>

#include "ops/reference.h"

namespace pagoda::ops::ref {

float quantize_row_i8(const float* x, int64_t k, int8_t* q) {
  float amax = 0.0f;
  for (int64_t i = 0; i < k; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  if (amax == 0.0f) {
    for (int64_t i = 0; i < k; ++i) q[i] = 0;
    return 0.0f;
  }
  const float inv = 127.0f / amax;
  for (int64_t i = 0; i < k; ++i) {
    const float r = std::nearbyint(x[i] * inv);  // half to even
    q[i] = static_cast<int8_t>(std::fmin(127.0f, std::fmax(-127.0f, r)));
  }
  return amax / 127.0f;
}

void linear_i8_quantized(const int8_t* qx, const float* x_scales, int64_t m, const Matrix& w,
                         const float* bias, float* y, int64_t ldy) {
  if (ldy == 0) ldy = w.rows;
  const auto* qw = static_cast<const int8_t*>(w.data);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t n = 0; n < w.rows; ++n) {
      int64_t dot = 0;
      for (int64_t k = 0; k < w.cols; ++k) dot += int64_t{qx[i * w.cols + k]} * qw[n * w.cols + k];
      // y = dot * (sx * sw) + bias, rounded once (a fused multiply-add).
      const float s = x_scales[i] * w.scales[n];
      y[i * ldy + n] =
          bias ? std::fma(static_cast<float>(dot), s, bias[n]) : static_cast<float>(dot) * s;
    }
  }
}

}  // namespace pagoda::ops::ref
