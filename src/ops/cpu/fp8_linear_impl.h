// The FP8 (e4m3, 128 x 128 block scales) linear kernel, included by
// kernels_impl.h inside its per-ISA anonymous namespace: it reuses that
// file's f32 GEMM tiles (linear_rows) and vector interface, including
// vload_e4m3 (the e4m3 value times 2^-8, exact).
//
// Every weight is dequantised as w = vmul(vload_e4m3(byte), scale * 2^8):
// the product is the same real number as f32(e4m3) * scale, so it rounds to
// the same f32 (the reference's matrix_at). Each output is then the f32
// tile's accumulator chain over k on those values: blocks are multiples of
// kLanes, so the lanes never straddle a scale change and the chain (full
// vectors, then one masked tail) is exactly linear_tile's. Hence the two
// paths below and linear_f32 on the dequantised matrix all give the same
// bits, for any m and any thread split.
#ifndef PAGODA_ISA
#error "include through kernels_impl.h"
#endif

static_assert(kFp8Block % kLanes == 0, "a vector must not straddle two FP8 scale blocks");

// The 2^8 that vload_e4m3 leaves out, put back into the scale (exact).
inline float fp8_lane_scale(float block_scale) { return block_scale * 256.0f; }

// R rows of x times C consecutive FP8 weight rows (one row block: the
// caller's tiles never straddle 128 rows), converting the weights in
// registers: the path of decode, where the weights stream from memory once
// and a scratch round trip would only add work.
template <int R, int C>
PAGODA_TARGET inline void fp8_tile(const float* x, const uint8_t* w, const float* scale_row,
                                   int64_t k, const float* bias, float* y, int64_t ldy) {
  Vec acc[R][C];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) acc[r][c] = vzero();
  }
  for (int64_t b0 = 0; b0 < k; b0 += kFp8Block) {
    const Vec sv = vset1(fp8_lane_scale(scale_row[b0 / kFp8Block]));
    const int64_t b1 = b0 + kFp8Block < k ? b0 + kFp8Block : k;
    int64_t i = b0;
    for (; i + kLanes <= b1; i += kLanes) {
      Vec xv[R];
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) xv[r] = vload(x + r * k + i);
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c) {
        const Vec wv = vmul(vload_e4m3(w + c * k + i), sv);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) acc[r][c] = vfma(xv[r], wv, acc[r][c]);
        // As linear_tile: ask for the next tile's rows one tile ahead.
        if constexpr (R == 1 && kPrefetchNextTile) {
          if (i % 64 == 0) __builtin_prefetch(w + (C + c) * k + i, 0, 1);
        }
      }
    }
    if (i < b1) {  // only in the last block: zero-padded lanes add zeros
      const int t = static_cast<int>(b1 - i);
      Vec xv[R];
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) xv[r] = vload_tail(x + r * k + i, t);
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c) {
        const Vec wv = vmul(vload_e4m3_tail(w + c * k + i, t), sv);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) acc[r][c] = vfma(xv[r], wv, acc[r][c]);
      }
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) {
      float s = vsum(acc[r][c]);
      if (bias) s += bias[c];
      y[r * ldy + c] = s;
    }
  }
}

// Weight rows [c0, c1) of an FP8 matrix dequantised into out (row stride
// k), with the same per-lane products as fp8_tile.
PAGODA_TARGET inline void fp8_dequantize_rows(const uint8_t* w, const float* block_scales,
                                              int64_t k, int64_t c0, int64_t c1, float* out) {
  const int64_t scale_cols = (k + kFp8Block - 1) / kFp8Block;
  for (int64_t c = c0; c < c1; ++c) {
    const uint8_t* wr = w + c * k;
    const float* scale_row = block_scales + c / kFp8Block * scale_cols;
    float* o = out + (c - c0) * k;
    for (int64_t b0 = 0; b0 < k; b0 += kFp8Block) {
      const Vec sv = vset1(fp8_lane_scale(scale_row[b0 / kFp8Block]));
      const int64_t b1 = b0 + kFp8Block < k ? b0 + kFp8Block : k;
      int64_t i = b0;
      for (; i + kLanes <= b1; i += kLanes) vstore(o + i, vmul(vload_e4m3(wr + i), sv));
      if (i < b1) {
        const int t = static_cast<int>(b1 - i);
        vstore_tail(o + i, vmul(vload_e4m3_tail(wr + i, t), sv), t);
      }
    }
  }
}

PAGODA_TARGET void linear_fp8(const float* x, int64_t m, const uint8_t* w,
                              const float* block_scales, int64_t k, int64_t ldy, const float* bias,
                              float* y, int64_t n0, int64_t n1) {
  const int64_t scale_cols = (k + kFp8Block - 1) / kFp8Block;
  if (m < kRowTile) {
    // Decode: C rows converted in registers per x row. Column blocks of
    // ~256 KiB of weights keep a second or third x row's pass in L2.
    int64_t block = (int64_t{256} << 10) / (k > 0 ? k : 1);
    block = block < 16 ? 16 : block - block % 16;
    for (int64_t b0 = n0; b0 < n1; b0 += block) {
      const int64_t b1 = b0 + block < n1 ? b0 + block : n1;
      for (int64_t r = 0; r < m; ++r) {
        int64_t c = b0;
        for (; c + kSingleRowCols <= b1; c += kSingleRowCols) {
          fp8_tile<1, kSingleRowCols>(x + r * k, w + c * k,
                                      block_scales + c / kFp8Block * scale_cols, k,
                                      bias ? bias + c : nullptr, y + r * ldy + c, ldy);
        }
        for (; c < b1; ++c) {
          fp8_tile<1, 1>(x + r * k, w + c * k, block_scales + c / kFp8Block * scale_cols, k,
                         bias ? bias + c : nullptr, y + r * ldy + c, ldy);
        }
      }
    }
    return;
  }
  // Prefill: a block of weight rows (~256 KiB as f32, 16 rows at least)
  // dequantised once into this thread's scratch, then every row tile of x
  // runs the f32 GEMM tiles over it, so the conversion costs 1/m per
  // multiply-add. The scratch only grows (no steady-state allocation).
  int64_t block = (int64_t{256} << 10) / (k > 0 ? 4 * k : 1);
  block = block < 16 ? 16 : block - block % 16;
  thread_local std::vector<float> scratch;
  const auto need = static_cast<size_t>(block * k);
  if (scratch.size() < need) scratch.resize(need);
  for (int64_t c0 = n0; c0 < n1; c0 += block) {
    const int64_t c1 = c0 + block < n1 ? c0 + block : n1;
    fp8_dequantize_rows(w, block_scales, k, c0, c1, scratch.data());
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
