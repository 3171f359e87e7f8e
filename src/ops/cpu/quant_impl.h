// The int8 kernel driver, written once and compiled per ISA: a
// quant_<isa>.cpp defines PAGODA_QISA (its namespace), PAGODA_QTARGET (the
// target attribute), the tile sizes kRowTile x kColTile (and kSingleRowCols
// for lone rows), and
//   dot_tile<R, C>(x, w, k, row_sums, out): out[r][c] = exact
//     sum_i x[r * k + i] * w[c * k + i] for R activation and C weight rows;
//   row_amax(x, k): max |x[i]|;
//   quantize_row(x, k, inv, q): q[i] = round_half_even(x[i] * inv);
// then includes this file.
#ifndef PAGODA_QISA
#error "define PAGODA_QISA before including quant_impl.h"
#endif

namespace pagoda::ops::PAGODA_QISA {

PAGODA_QTARGET void quantize_rows(const float* x, int64_t k, int8_t* q, float* scales, int64_t r0,
                                  int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const float amax = row_amax(x + r * k, k);
    if (amax == 0.0f) {
      scales[r] = 0.0f;
      for (int64_t i = 0; i < k; ++i) q[r * k + i] = 0;
      continue;
    }
    scales[r] = amax / 127.0f;
    quantize_row(x + r * k, k, 127.0f / amax, q + r * k);
  }
}

// R activation rows by C weight rows: the integer tile, then the shared
// float epilogue.
template <int R, int C>
PAGODA_QTARGET inline void linear_tile(const int8_t* x, const float* x_scales, const int8_t* w,
                                       const float* w_scales, const int32_t* row_sums, int64_t k,
                                       const float* bias, float* y, int64_t ldy) {
  int32_t dots[R][C];
  dot_tile<R, C>(x, w, k, row_sums, dots);
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) {
      y[r * ldy + c] =
          cpu::dequantize(dots[r][c], x_scales[r], w_scales[c], bias ? bias + c : nullptr);
    }
  }
}

template <int R, int C>
PAGODA_QTARGET inline void linear_rows(const int8_t* x, const float* x_scales, const int8_t* w,
                                       const float* w_scales, const int32_t* row_sums, int64_t k,
                                       int64_t ldy, const float* bias, float* y, int64_t c0,
                                       int64_t c1) {
  int64_t c = c0;
  for (; c + C <= c1; c += C) {
    linear_tile<R, C>(x, x_scales, w + c * k, w_scales + c, row_sums + c, k,
                      bias ? bias + c : nullptr, y + c, ldy);
  }
  for (; c < c1; ++c) {
    linear_tile<R, 1>(x, x_scales, w + c * k, w_scales + c, row_sums + c, k,
                      bias ? bias + c : nullptr, y + c, ldy);
  }
}

PAGODA_QTARGET void linear_i8(const int8_t* qx, const float* x_scales, int64_t m, const int8_t* w,
                              const float* w_scales, const int32_t* row_sums, int64_t k,
                              int64_t ldy, const float* bias, float* y, int64_t n0, int64_t n1) {
  // Column blocks of ~256 KiB of weights stay in L2 while every row tile
  // passes over them, so the weights stream from memory once per call.
  int64_t block = (int64_t{256} << 10) / (k > 0 ? k : 1);
  block = block < 16 ? 16 : block - block % 16;
  for (int64_t c0 = n0; c0 < n1; c0 += block) {
    const int64_t c1 = c0 + block < n1 ? c0 + block : n1;
    int64_t r = 0;
    for (; r + kRowTile <= m; r += kRowTile) {
      linear_rows<kRowTile, kColTile>(qx + r * k, x_scales + r, w, w_scales, row_sums, k, ldy, bias,
                                      y + r * ldy, c0, c1);
    }
    for (; r < m; ++r) {
      linear_rows<1, kSingleRowCols>(qx + r * k, x_scales + r, w, w_scales, row_sums, k, ldy, bias,
                                     y + r * ldy, c0, c1);
    }
  }
}

}  // namespace pagoda::ops::PAGODA_QISA
