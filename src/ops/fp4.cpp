// FP4 (e2m1 + E8M0 per 32 inputs) matrices outside the kernels:
// dequantisation of rows for load-time conversions (unaligned
// tensor-parallel slices, int8 requantisation, f32 copies); the kernels
// expand the codes on the fly.
#include "core/dtype.h"
#include "core/error.h"
#include "ops/ops.h"

namespace pagoda::ops {

void dequantize_fp4_row(const Matrix& w, int64_t row, int64_t c0, int64_t c1, float* out) {
  PAGODA_CHECK(w.dtype == DType::F4E2M1 && w.e8m0_scales && row >= 0 && row < w.rows &&
                   c0 >= 0 && c0 <= c1 && c1 <= w.cols && w.cols % kFp4Block == 0,
               "dequantize_fp4_row: row {} cols [{}, {}) of a {} [{}, {}] matrix", row, c0, c1,
               dtype_name(w.dtype), w.rows, w.cols);
  const auto* bytes = static_cast<const uint8_t*>(w.data) + row * fp4_row_bytes(w.cols);
  const uint8_t* scales = w.e8m0_scales + row * fp4_scale_cols(w.cols);
  // Low nibble = even column; one exact product per weight, as the kernels.
  for (int64_t c = c0; c < c1; ++c) {
    const uint8_t code = static_cast<uint8_t>(bytes[c / 2] >> (4 * (c % 2)));
    out[c - c0] = f4e2m1_to_f32(code) * f8e8m0_to_f32(scales[c / kFp4Block]);
  }
}

}  // namespace pagoda::ops
