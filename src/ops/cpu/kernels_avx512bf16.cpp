// The avx512bf16 kernel table: the avx512 table, with bf16-weight linears
// done as bf16 x bf16 -> f32 dot products (vdpbf16ps) instead of widening
// the weights to f32. Activations are rounded to bf16 once per call
// (round-to-nearest-even, bf16_rows); weights are read in place, row-major.
//
// Determinism: every output element is one accumulator chain over k in
// steps of 32 bf16 pairs, the same zero-masked tail, the same horizontal
// sum tree and then the bias, whichever tile (decode R = 1 or a prefill
// row tile) and thread computes it; so rows do not depend on the batch.
#include <immintrin.h>

#include <cstdint>

#include "ops/cpu/kernels.h"
#include "ops/cpu/vec_avx512.h"

#define PAGODA_BF16_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma")))

namespace pagoda::ops::avx512bf16 {
namespace {

// Row tile for batched rows: 4 x 6 = 24 accumulators + 4 activation rows +
// 1 weight vector of the 32 zmm registers; 24 dot products per 10 loads.
#ifndef PAGODA_BF16_TILE_R  // build-time switches for A/B benchmarks
#define PAGODA_BF16_TILE_R 4
#define PAGODA_BF16_TILE_C 6
#endif
constexpr int kRowTile = PAGODA_BF16_TILE_R, kColTile = PAGODA_BF16_TILE_C;
// A lone row (decode) streams this many weight rows at once.
constexpr int kSingleRowCols = 8;
// Weights of one column block (~this many bytes) stay in L2 while every
// row tile passes over them, so they come from memory once per call.
constexpr int64_t kColumnBlockBytes = int64_t{256} << 10;

PAGODA_BF16_TARGET inline __m512bh load_bh(const uint16_t* p) {
  return (__m512bh)_mm512_loadu_si512(p);
}
// Lanes at and beyond n read as +0 (and never touch memory): they add
// exact zeros to the chain.
PAGODA_BF16_TARGET inline __m512bh load_bh_tail(const uint16_t* p, int n) {
  const __mmask32 mask = static_cast<__mmask32>((uint64_t{1} << n) - 1);
  return (__m512bh)_mm512_maskz_loadu_epi16(mask, p);
}

// y[r * ldy + c] for R activation rows x (bf16, row stride k) and C weight
// rows from w (row stride k): the register-blocked micro kernel.
template <int R, int C>
PAGODA_BF16_TARGET inline void dot_tile(const uint16_t* x, const uint16_t* w, int64_t k,
                                        const float* bias, float* y, int64_t ldy) {
  __m512 acc[R][C];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  int64_t i = 0;
  for (; i + 32 <= k; i += 32) {
    __m512bh xv[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) xv[r] = load_bh(x + r * k + i);
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) {
      const __m512bh wv = load_bh(w + c * k + i);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], xv[r], wv);
      // Decode is bound by streaming weights: ask for the next tile's rows
      // (C rows on) one tile ahead, so C row streams do not wait on the
      // hardware prefetcher. Each 32-element step is exactly one line.
      if constexpr (R == 1) __builtin_prefetch(w + (C + c) * k + i, 0, 1);
    }
  }
  if (i < k) {
    const int t = static_cast<int>(k - i);
    __m512bh xv[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) xv[r] = load_bh_tail(x + r * k + i, t);
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) {
      const __m512bh wv = load_bh_tail(w + c * k + i, t);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], xv[r], wv);
    }
  }
  // Sums in groups of 4 columns (+ bias, the same add as a scalar one).
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < C; c += 4) {
      const __m512 z = _mm512_setzero_ps();
      const __m512 a1 = c + 1 < C ? acc[r][c + 1] : z;
      const __m512 a2 = c + 2 < C ? acc[r][c + 2] : z;
      const __m512 a3 = c + 3 < C ? acc[r][c + 3] : z;
      __m128 s = avx512::hsum4(acc[r][c], a1, a2, a3);
      const int count = C - c < 4 ? C - c : 4;
      const __mmask8 mask = static_cast<__mmask8>((1u << count) - 1);
      if (bias) s = _mm_add_ps(s, _mm_maskz_loadu_ps(mask, bias + c));
      _mm_mask_storeu_ps(y + r * ldy + c, mask, s);
    }
  }
}

// Columns [c0, c1) for R consecutive rows: C weight rows per tile, then one
// at a time for the remainder.
template <int R, int C>
PAGODA_BF16_TARGET inline void dot_rows(const uint16_t* x, const uint16_t* w, int64_t k,
                                        int64_t ldy, const float* bias, float* y, int64_t c0,
                                        int64_t c1) {
  int64_t c = c0;
  for (; c + C <= c1; c += C)
    dot_tile<R, C>(x, w + c * k, k, bias ? bias + c : nullptr, y + c, ldy);
  for (; c < c1; ++c) dot_tile<R, 1>(x, w + c * k, k, bias ? bias + c : nullptr, y + c, ldy);
}

PAGODA_BF16_TARGET void linear_bf16_dot(const uint16_t* x, int64_t m, const uint16_t* w, int64_t k,
                                        int64_t n, const float* bias, float* y, int64_t n0,
                                        int64_t n1) {
  const int64_t row_bytes = k * 2;
  int64_t block = kColumnBlockBytes / (row_bytes > 0 ? row_bytes : 1);
  block = block < 2 * kColTile ? 2 * kColTile : block - block % kColTile;
  for (int64_t c0 = n0; c0 < n1; c0 += block) {
    const int64_t c1 = c0 + block < n1 ? c0 + block : n1;
    int64_t r = 0;
    for (; r + kRowTile <= m; r += kRowTile) {
      dot_rows<kRowTile, kColTile>(x + r * k, w, k, n, bias, y + r * n, c0, c1);
    }
    for (; r < m; ++r) dot_rows<1, kSingleRowCols>(x + r * k, w, k, n, bias, y + r * n, c0, c1);
  }
}

// out[i] = bf16(x[i]), round-to-nearest-even (vcvtne2ps2bf16).
PAGODA_BF16_TARGET void to_bf16(const float* x, int64_t count, uint16_t* out) {
  int64_t i = 0;
  for (; i + 32 <= count; i += 32) {
    const __m512bh h = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(x + i));
    _mm512_storeu_si512(out + i, (__m512i)h);
  }
  for (; i + 16 <= count; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x + i)));
  }
  if (i < count) {
    const int t = static_cast<int>(count - i);
    const __mmask16 mask = static_cast<__mmask16>((1u << t) - 1);
    const __m256bh h = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mask, x + i));
    _mm256_mask_storeu_epi16(out + i, mask, (__m256i)h);
  }
}

}  // namespace
}  // namespace pagoda::ops::avx512bf16

namespace pagoda::ops::cpu {

const KernelTable& avx512bf16_kernels() {
  static const KernelTable table = [] {
    KernelTable t = avx512_kernels();
    t.bf16_rows = avx512bf16::to_bf16;
    t.linear_bf16_dot = avx512bf16::linear_bf16_dot;
    t.linear_bf16_packed = avx512bf16_impl::linear_packed;
    t.attention_bf16_flash = avx512bf16_impl::flash_attention;
    return t;
  }();
  return table;
}

}  // namespace pagoda::ops::cpu
