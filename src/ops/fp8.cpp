// FP8 block-scaled matrices outside the kernels: dequantisation of rows
// for load-time conversions (the kernels dequantise on the fly).
#include "core/dtype.h"
#include "core/error.h"
#include "ops/ops.h"

namespace pagoda::ops {

void dequantize_fp8_row(const Matrix& w, int64_t row, int64_t c0, int64_t c1, float* out) {
  PAGODA_CHECK(w.dtype == DType::F8E4M3 && w.block_scales && row >= 0 && row < w.rows &&
                   c0 >= 0 && c0 <= c1 && c1 <= w.cols,
               "dequantize_fp8_row: row {} cols [{}, {}) of a {} [{}, {}] matrix", row, c0, c1,
               dtype_name(w.dtype), w.rows, w.cols);
  const auto* bytes = static_cast<const uint8_t*>(w.data) + row * w.cols;
  const float* scale_row = w.block_scales + row / kFp8Block * fp8_scale_cols(w.cols);
  // One f32 product per weight, rounded once: the kernels' value exactly.
  for (int64_t c = c0; c < c1; ++c) out[c - c0] = f8e4m3_to_f32(bytes[c]) * scale_row[c / kFp8Block];
}

}  // namespace pagoda::ops
