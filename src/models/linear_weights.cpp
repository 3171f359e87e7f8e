#include "models/linear_weights.h"

#include "ops/packed.h"

namespace pagoda {

ops::Matrix prepare_linear(WeightStore& weights, const ops::Matrix& m,
                           const WeightOptions& options, bool source_still_used) {
  if (options.quantization == Quantization::Int8) {
    const ops::Matrix q = weights.quantize_int8(m, source_still_used);
    if (options.repack && q.cols % 4 == 0 && ops::packed_i8_is_native()) {
      return weights.repack(q, false);
    }
    return q;
  }
  if (options.repack && m.dtype == DType::BF16 && m.cols % 2 == 0 && ops::packed_bf16_is_native()) {
    return weights.repack(m, source_still_used);
  }
  return m;
}

void matrix_row_f32(const ops::Matrix& m, int64_t r, float* out) {
  if (m.dtype == DType::F8E4M3) {
    ops::dequantize_fp8_row(m, r, 0, m.cols, out);
  } else if (m.dtype == DType::F4E2M1) {
    ops::dequantize_fp4_row(m, r, 0, m.cols, out);
  } else {
    const auto row = static_cast<int32_t>(r);
    ops::embedding(&row, 1, m, out);
  }
}

ops::Matrix f32_copy(const ops::Matrix& m, std::vector<float>& storage) {
  storage.resize(m.rows * m.cols);
  for (int64_t r = 0; r < m.rows; ++r) matrix_row_f32(m, r, storage.data() + r * m.cols);
  return {storage.data(), DType::F32, m.rows, m.cols};
}

}  // namespace pagoda
