// The FP4 (e2m1 codes, one E8M0 scale per 32 inputs of a row) linear
// kernel, included by kernels_impl.h inside its per-ISA anonymous
// namespace: it reuses that file's f32 GEMM tiles (linear_rows) and the
// vector interface, including e2m1_table / vload_e2m1 (vec_<isa>.h).
//
// Every weight is the table entry of its code, and a block's table is the
// 16 e2m1 values times the block's scale: exactly f4e2m1_to_f32(code) *
// scale, the reference's matrix_at (e2m1 value x power of two is exact).
// Each output is then the f32 tile's accumulator chain over k on those
// values: k is a multiple of the block, itself a multiple of kLanes, so
// there is no tail and the chain is linear_tile's. Hence the two paths
// below and linear_f32 on the dequantised matrix give the same bits, for
// any m and any thread split.
#ifndef PAGODA_ISA
#error "include through kernels_impl.h"
#endif

static_assert(kFp4Block % kLanes == 0, "a vector must not straddle two FP4 scale blocks");

// One x row times C consecutive FP4 weight rows, expanding the codes in
// registers: the decode path, where the 0.5 byte a weight streams from
// memory once. Per 32-block the C rows' tables are built first, then each
// x vector is loaded once for all C rows (as linear_tile does).
template <int C>
PAGODA_TARGET inline void fp4_tile(const float* x, const uint8_t* w, const uint8_t* scales,
                                   int64_t k, const float* bias, float* y) {
  const int64_t row_bytes = k / 2, scale_cols = k / kFp4Block;
  Vec acc[C];
#pragma GCC unroll 16
  for (int c = 0; c < C; ++c) acc[c] = vzero();
  for (int64_t b = 0; b < scale_cols; ++b) {
    const int64_t i0 = b * kFp4Block;
    E2m1Table table[C];
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) table[c] = e2m1_table(f8e8m0_to_f32(scales[c * scale_cols + b]));
    // A constant trip count: straight-line code, no remainder dispatch.
#pragma GCC unroll 8
    for (int j = 0; j < kFp4Block / kLanes; ++j) {
      const int64_t i = i0 + j * kLanes;
      const Vec xv = vload(x + i);
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c)
        acc[c] = vfma(xv, vload_e2m1(w + c * row_bytes + i / 2, table[c]), acc[c]);
    }
    // As linear_tile: ask for the next tile's rows one tile ahead (a cache
    // line holds 128 weights).
    if constexpr (kPrefetchNextTile) {
      if (i0 % 128 == 0) {
#pragma GCC unroll 16
        for (int c = 0; c < C; ++c) __builtin_prefetch(w + (C + c) * row_bytes + i0 / 2, 0, 1);
      }
    }
  }
#pragma GCC unroll 16
  for (int c = 0; c < C; ++c) {
    float s = vsum(acc[c]);
    if (bias) s += bias[c];
    y[c] = s;
  }
}

// Weight rows [c0, c1) of an FP4 matrix dequantised into out (row stride
// k), with fp4_tile's values.
PAGODA_TARGET inline void fp4_dequantize_rows(const uint8_t* w, const uint8_t* e8m0_scales,
                                              int64_t k, int64_t c0, int64_t c1, float* out) {
  const int64_t row_bytes = k / 2, scale_cols = k / kFp4Block;
  for (int64_t c = c0; c < c1; ++c) {
    const uint8_t* wr = w + c * row_bytes;
    const uint8_t* sr = e8m0_scales + c * scale_cols;
    float* o = out + (c - c0) * k;
    for (int64_t b = 0; b < scale_cols; ++b) {
      const E2m1Table table = e2m1_table(f8e8m0_to_f32(sr[b]));
#pragma GCC unroll 8
      for (int j = 0; j < kFp4Block / kLanes; ++j) {
        const int64_t i = b * kFp4Block + j * kLanes;
        vstore(o + i, vload_e2m1(wr + i / 2, table));
      }
    }
  }
}

PAGODA_TARGET void linear_fp4(const float* x, int64_t m, const uint8_t* w,
                              const uint8_t* e8m0_scales, int64_t k, int64_t ldy, const float* bias,
                              float* y, int64_t n0, int64_t n1) {
  const int64_t row_bytes = k / 2, scale_cols = k / kFp4Block;
  if (m < kRowTile) {
    // Decode: column blocks of ~256 KiB of weights keep a second or third
    // x row's pass in L2.
    int64_t block = (int64_t{256} << 10) / (row_bytes > 0 ? row_bytes : 1);
    block = block < 16 ? 16 : block - block % 16;
    for (int64_t b0 = n0; b0 < n1; b0 += block) {
      const int64_t b1 = b0 + block < n1 ? b0 + block : n1;
      for (int64_t r = 0; r < m; ++r) {
        int64_t c = b0;
        for (; c + kSingleRowCols <= b1; c += kSingleRowCols) {
          fp4_tile<kSingleRowCols>(x + r * k, w + c * row_bytes, e8m0_scales + c * scale_cols, k,
                                   bias ? bias + c : nullptr, y + r * ldy + c);
        }
        for (; c < b1; ++c) {
          fp4_tile<1>(x + r * k, w + c * row_bytes, e8m0_scales + c * scale_cols, k,
                      bias ? bias + c : nullptr, y + r * ldy + c);
        }
      }
    }
    return;
  }
  // Prefill: as linear_fp8, a block of weight rows (~256 KiB as f32, 16
  // rows at least) dequantised once into this thread's scratch, then the
  // f32 GEMM tiles over it; the scratch only grows.
  int64_t block = (int64_t{256} << 10) / (k > 0 ? 4 * k : 1);
  block = block < 16 ? 16 : block - block % 16;
  thread_local std::vector<float> scratch;
  const auto need = static_cast<size_t>(block * k);
  if (scratch.size() < need) scratch.resize(need);
  for (int64_t c0 = n0; c0 < n1; c0 += block) {
    const int64_t c1 = c0 + block < n1 ? c0 + block : n1;
    fp4_dequantize_rows(w, e8m0_scales, k, c0, c1, scratch.data());
    // linear_rows indexes weights and bias from column 0 and y with stride
    // ldy: shift all three so that scratch row 0 is column c0.
    const float* wc = scratch.data();
    const float* bc = bias ? bias + c0 : nullptr;
    int64_t r = 0;
    for (; r + kRowTile <= m; r += kRowTile) {
      linear_rows<kRowTile, kColTile>(x + r * k, wc, k, ldy, bc, y + r * ldy + c0, 0, c1 - c0);
    }
    for (; r < m; ++r) {
      linear_rows<1, kSingleRowCols>(x + r * k, wc, k, ldy, bc, y + r * ldy + c0, 0, c1 - c0);
    }
  }
}
