// The I8 entry points (ops/quant.h, and ops::linear on I8 weights):
// validate, quantize the activations into a reusable buffer, split output
// columns across threads, run the selected ISA's int8 kernels (dispatch.cpp
// picks the table).
#include <algorithm>
#include <vector>

#include "core/error.h"
#include "core/parallel.h"
#include "ops/cpu/quant_kernels.h"
#include "ops/packed.h"
#include "ops/quant.h"

namespace pagoda::ops {

namespace {

// linear_i8_quantized over packed weights without a native kernel: the
// same exact integer dots and epilogue, read through packed_index.
void packed_i8_portable(const int8_t* qx, const float* x_scales, int64_t m, const Matrix& w,
                        int64_t ldy, const float* bias, float* y, int64_t p0, int64_t p1) {
  const auto* wq = static_cast<const int8_t*>(w.data);
  const int64_t k = w.cols;
  for (int64_t c = p0 * kPackedColsI8; c < std::min(w.rows, p1 * kPackedColsI8); ++c) {
    for (int64_t r = 0; r < m; ++r) {
      int32_t dot = 0;
      for (int64_t i = 0; i < k; ++i)
        dot += qx[r * k + i] * wq[packed_index(c, i, w.rows, k, DType::I8)];
      y[r * ldy + c] = cpu::dequantize(dot, x_scales[r], w.scales[c], bias ? bias + c : nullptr);
    }
  }
}

}  // namespace

const char* int8_kernel_name() { return cpu::active_quant_kernels().name; }

void quantize_rows_i8(const float* x, int64_t m, int64_t k, int8_t* q, float* scales) {
  const cpu::QuantKernelTable& kt = cpu::active_quant_kernels();
  const int64_t rows_per_chunk = std::max<int64_t>(1, 16384 / std::max<int64_t>(k, 1));
  parallel_for(m, rows_per_chunk,
               [&](int64_t r0, int64_t r1) { kt.quantize_rows(x, k, q, scales, r0, r1); });
}

void linear_i8_quantized(const int8_t* qx, const float* x_scales, int64_t m, const Matrix& w,
                         const float* bias, float* y, int64_t ldy) {
  if (m <= 0 || w.rows <= 0) return;
  cpu::check_i8(w);
  if (ldy == 0) ldy = w.rows;
  PAGODA_CHECK(ldy >= w.rows, "linear: output stride {} < {} rows", ldy, w.rows);
  const int64_t unit = w.packed ? kPackedColsI8 : cpu::kI8ColumnUnit;
  const int64_t units = (w.rows + unit - 1) / unit;
  // A unit is worth a thread when it carries ~64K multiply-adds.
  const int64_t min_units = std::max<int64_t>(1, 65536 / std::max<int64_t>(1, unit * w.cols * m));
  parallel_for_tapered(units, min_units, 1, [&](int64_t u0, int64_t u1) {
    cpu::linear_i8_units({qx, x_scales}, m, w, bias, y, ldy, u0, u1);
  });
}

void cpu::check_i8(const Matrix& w) {
  PAGODA_CHECK(w.dtype == DType::I8 && w.scales && w.row_sums, "linear: not an I8 matrix ({})",
               dtype_name(w.dtype));
  PAGODA_CHECK(w.cols <= kMaxInt8Cols, "linear: I8 rows of {} values (at most {})", w.cols,
               kMaxInt8Cols);
  PAGODA_CHECK(!w.packed || w.cols % 4 == 0, "linear: packed I8 rows of {} values", w.cols);
}

cpu::QuantizedRows cpu::quantize_activations(const float* x, int64_t m, int64_t k) {
  // Grown to the largest batch seen by this thread, then reused: no
  // allocation per call in the steady state.
  thread_local std::vector<int8_t> qx;
  thread_local std::vector<float> x_scales;
  const auto need = static_cast<size_t>(m * k);
  if (qx.size() < need) qx.resize(need);
  if (x_scales.size() < static_cast<size_t>(m)) x_scales.resize(static_cast<size_t>(m));
  quantize_rows_i8(x, m, k, qx.data(), x_scales.data());
  return {qx.data(), x_scales.data()};
}

void cpu::linear_i8_units(const QuantizedRows& x, int64_t m, const Matrix& w, const float* bias,
                          float* y, int64_t ldy, int64_t u0, int64_t u1) {
  const QuantKernelTable& kt = active_quant_kernels();
  const int64_t n = w.rows, k = w.cols;
  const auto* wq = static_cast<const int8_t*>(w.data);
  if (!w.packed) {
    const int64_t n0 = u0 * kI8ColumnUnit, n1 = std::min(n, u1 * kI8ColumnUnit);
    kt.linear_i8(x.q, x.scales, m, wq, w.scales, w.row_sums, k, ldy, bias, y, n0, n1);
  } else if (kt.linear_i8_packed) {
    kt.linear_i8_packed(x.q, x.scales, m, wq, w.scales, w.row_sums, k, n, ldy, bias, y, u0, u1);
  } else {
    packed_i8_portable(x.q, x.scales, m, w, ldy, bias, y, u0, u1);
  }
}

}  // namespace pagoda::ops
