// Int8 kernels for baseline x86-64 (or any target): plain integer loops.
#include <cmath>
#include <cstdint>

#include "ops/cpu/quant_kernels.h"

#define PAGODA_QISA quant_scalar
#define PAGODA_QTARGET

namespace pagoda::ops::quant_scalar {

constexpr int kRowTile = 2, kColTile = 2, kSingleRowCols = 4;

template <int R, int C>
inline void dot_tile(const int8_t* x, const int8_t* w, int64_t k, const int32_t* /*row_sums*/,
                     int32_t (&out)[R][C]) {
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) {
      int32_t s = 0;
      for (int64_t i = 0; i < k; ++i) s += int32_t{x[r * k + i]} * int32_t{w[c * k + i]};
      out[r][c] = s;
    }
  }
}

inline float row_amax(const float* x, int64_t k) {
  float m = 0.0f;
  for (int64_t i = 0; i < k; ++i) m = std::fabs(x[i]) > m ? std::fabs(x[i]) : m;
  return m;
}

inline void quantize_row(const float* x, int64_t k, float inv, int8_t* q) {
  // nearbyint rounds half to even in the default rounding mode, like the
  // vector conversions (cvtps2dq).
  for (int64_t i = 0; i < k; ++i) q[i] = static_cast<int8_t>(std::nearbyint(x[i] * inv));
}

}  // namespace pagoda::ops::quant_scalar

#include "ops/cpu/quant_impl.h"

namespace pagoda::ops::cpu {
const QuantKernelTable& scalar_quant_kernels() {
  static const QuantKernelTable table{"scalar", quant_scalar::quantize_rows,
                                      quant_scalar::linear_i8};
  return table;
}
}  // namespace pagoda::ops::cpu
