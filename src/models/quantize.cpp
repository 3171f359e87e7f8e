#include "models/quantize.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "core/parallel.h"
#include "ops/packed.h"
#include "ops/quant.h"

namespace pagoda {

namespace {

size_t align64(size_t n) { return (n + 63) / 64 * 64; }

}  // namespace

std::string_view quantization_name(Quantization q) {
  return q == Quantization::Int8 ? "int8" : "none";
}

Quantization parse_quantization(std::string_view name) {
  if (name == "none") return Quantization::None;
  if (name == "int8") return Quantization::Int8;
  throw_input_error("unknown quantization '{}' (choose none or int8)", name);
}

size_t int8_matrix_bytes(int64_t rows, int64_t cols, bool packed) {
  const auto r = static_cast<size_t>(rows), c = static_cast<size_t>(cols);
  const size_t values = packed ? ops::packed_bytes(rows, cols, DType::I8) : r * c;
  return align64(values) + align64(r * sizeof(float)) + r * sizeof(int32_t);
}

ops::Matrix repack_int8(const ops::Matrix& q, void* out) {
  const size_t values = align64(ops::packed_bytes(q.rows, q.cols, DType::I8));
  auto* base = static_cast<uint8_t*>(out);
  auto* scales = reinterpret_cast<float*>(base + values);
  auto* sums = reinterpret_cast<int32_t*>(reinterpret_cast<uint8_t*>(scales) +
                                          align64(static_cast<size_t>(q.rows) * sizeof(float)));
  std::copy(q.scales, q.scales + q.rows, scales);
  std::copy(q.row_sums, q.row_sums + q.rows, sums);
  ops::Matrix packed = ops::pack_matrix(q, out);
  packed.scales = scales;
  packed.row_sums = sums;
  return packed;
}

ops::Matrix quantize_matrix_int8(const ops::Matrix& src, void* out) {
  PAGODA_CHECK(src.dtype == DType::F32 || src.dtype == DType::BF16 ||
                   src.dtype == DType::F8E4M3 || src.dtype == DType::F4E2M1,
               "quantize_matrix_int8: {} weights", dtype_name(src.dtype));
  if (src.cols > ops::kMaxInt8Cols) {
    throw_input_error("--quantization int8: weight rows of {} values are longer than {}", src.cols,
                      ops::kMaxInt8Cols);
  }
  const int64_t rows = src.rows, cols = src.cols;
  auto* base = static_cast<uint8_t*>(out);
  auto* q = reinterpret_cast<int8_t*>(base);
  auto* scales = reinterpret_cast<float*>(base + align64(static_cast<size_t>(rows * cols)));
  auto* sums = reinterpret_cast<int32_t*>(reinterpret_cast<uint8_t*>(scales) +
                                          align64(static_cast<size_t>(rows) * sizeof(float)));
  // Chunks of rows per thread; a bf16 or FP8 row is widened into a
  // per-thread buffer first (nested quantize_rows_i8 runs on the calling
  // thread). FP8 rows are dequantised to exactly the values the FP8 kernel
  // uses, then requantised per row like any float row.
  const int64_t rows_per_chunk = std::max<int64_t>(1, 65536 / std::max<int64_t>(cols, 1));
  parallel_for(rows, rows_per_chunk, [&](int64_t r0, int64_t r1) {
    std::vector<float> row;
    if (src.dtype != DType::F32) row.resize(static_cast<size_t>(cols));
    for (int64_t r = r0; r < r1; ++r) {
      const float* x;
      if (src.dtype == DType::F8E4M3) {
        ops::dequantize_fp8_row(src, r, 0, cols, row.data());
        x = row.data();
      } else if (src.dtype == DType::F4E2M1) {
        ops::dequantize_fp4_row(src, r, 0, cols, row.data());
        x = row.data();
      } else if (src.dtype == DType::BF16) {
        const auto* h = static_cast<const bf16_t*>(src.data) + r * cols;
        for (int64_t c = 0; c < cols; ++c) row[c] = bf16_to_f32(h[c]);
        x = row.data();
      } else {
        x = static_cast<const float*>(src.data) + r * cols;
      }
      int8_t* qr = q + r * cols;
      ops::quantize_rows_i8(x, 1, cols, qr, &scales[r]);
      int32_t s = 0;
      for (int64_t c = 0; c < cols; ++c) s += qr[c];
      sums[r] = s;
    }
  });
  return {q, DType::I8, rows, cols, scales, sums};
}

int64_t matrix_bytes(const ops::Matrix& m) {
  if (m.dtype == DType::I8)
    return static_cast<int64_t>(int8_matrix_bytes(m.rows, m.cols, m.packed));
  if (m.packed) return static_cast<int64_t>(ops::packed_bytes(m.rows, m.cols, DType::BF16));
  if (m.dtype == DType::F4E2M1)
    return m.rows * (ops::fp4_row_bytes(m.cols) + ops::fp4_scale_cols(m.cols));
  if (m.dtype == DType::F8E4M3) {
    return m.rows * m.cols +
           ops::fp8_scale_rows(m.rows) * ops::fp8_scale_cols(m.cols) * int64_t{sizeof(float)};
  }
  return m.rows * m.cols * static_cast<int64_t>(dtype_size(m.dtype));
}

}  // namespace pagoda
