// The GEMM/GEMV over packed bf16 weights (ops/packed.h) for AVX2 + FMA,
// with f32 activations: the AVX2 counterpart of packed_avx512bf16.cpp.
// A 256-bit load of a panel's pair row holds 8 columns' (even, odd) bf16
// pairs, one per 32-bit word; the even inputs' weights are the words
// shifted left by 16 and the odd ones the words with the low half cleared,
// both exact f32s. So widening costs 2 integer ops per 16 weights, shared
// by every row of the tile, and the tile streams broadcast activations
// into kTileRows x kTileVectors f32 accumulators.
//
// Determinism: output [r, c] is one accumulator chain over the pairs p =
// 0, 1, ... in order, fma(x[2p], w_even) then fma(x[2p + 1], w_odd), from
// +0, then + bias, in every tile shape (1 to kTileRows rows, 2 or 8 vectors
// wide), k block and thread split: rows do not depend on the batch.
// Between k blocks the partial sums rest in y as f32, which is exact.
#include <immintrin.h>

#include <cstdint>

#include "ops/cpu/kernels.h"
#include "ops/packed.h"

#define PAGODA_AVX2_TARGET __attribute__((target("avx2,fma")))

namespace pagoda::ops::cpu::avx2_impl {
namespace {

constexpr int kPanelVectors = kPackedCols / 8;  // ymm per panel pair row
// 16 ymm registers: 5 rows x 2 vectors = 10 accumulators, the 2 vectors'
// even and odd weights (4) and one row's 2 broadcast activations (the
// mask is a memory operand). A lone row (decode) takes the whole panel
// row: 8 accumulators. (4 x 2 reached ~75% of the FMA peak at m = 512 on
// Zen 5, 6 rows x 1 vector at a time ~68%, this ~83%.)
constexpr int kTileRows = 5, kTileVectors = 2;
// Pairs per k block: a column group's block (kBlockPairs x 64 bytes,
// 16 KiB) stays in L1 while every row tile passes over it.
constexpr int64_t kBlockPairs = 256;
constexpr int64_t kPairStride = kPackedCols * 2;  // bf16 elements per pair of a panel

PAGODA_AVX2_TARGET inline __m256 even_weights(__m256i words) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(words, 16));
}
PAGODA_AVX2_TARGET inline __m256 odd_weights(__m256i words) {
  return _mm256_castsi256_ps(
      _mm256_and_si256(words, _mm256_set1_epi32(static_cast<int32_t>(0xffff0000u))));
}

// x[0] in every lane, loaded where it is used: as an asm statement, so the
// compiler cannot keep a tile's 2 R broadcasts live across the vectors
// (it would, and spill them: 16 ymm registers).
PAGODA_AVX2_TARGET inline __m256 broadcast(const float* x) {
  __m256 r;
  __asm__ volatile("vbroadcastss %1, %0" : "=x"(r) : "m"(*x));
  return r;
}

// acc[r][v] (+)= sum over pairs [p0, p1) of x row r's pair times vectors
// [v0, v0 + V) of the panel's pair rows; y rows at y + r * ldy (columns
// from the panel's first). Not inlined, as packed_avx512bf16.cpp's tile.
template <int R, int V>
__attribute__((noinline)) PAGODA_AVX2_TARGET void panel_tile(const float* x, int64_t ldx,
                                                             const uint16_t* panel, int v0,
                                                             int64_t p0, int64_t p1, bool first,
                                                             float* y, int64_t ldy) {
  __m256 acc[R][V];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v)
      acc[r][v] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(y + r * ldy + 8 * (v0 + v));
  }
  const uint16_t* b = panel + p0 * kPairStride + 16 * v0;
  for (int64_t p = p0; p < p1; ++p, b += kPairStride) {
    if constexpr (R == 1) {
      // A lone row (decode) is bound by streaming the panel: ask for all
      // four lines of the pair 4 KiB ahead (as the AVX-512 kernel does).
#pragma GCC unroll 4
      for (int l = 0; l < 4; ++l) __builtin_prefetch(b + 16 * kPairStride + 32 * l, 0, 1);
    }
    __m256 even[V], odd[V];
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) {
      const __m256i words = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16 * v));
      even[v] = even_weights(words);
      odd[v] = odd_weights(words);
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 x0 = broadcast(x + r * ldx + 2 * p);
      const __m256 x1 = broadcast(x + r * ldx + 2 * p + 1);
#pragma GCC unroll 8
      for (int v = 0; v < V; ++v) {
        acc[r][v] = _mm256_fmadd_ps(x0, even[v], acc[r][v]);
        acc[r][v] = _mm256_fmadd_ps(x1, odd[v], acc[r][v]);
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) _mm256_storeu_ps(y + r * ldy + 8 * (v0 + v), acc[r][v]);
  }
}

// panel_tile<rows, V> for a runtime rows in [1, R].
template <int R, int V>
PAGODA_AVX2_TARGET inline void tile_upto(int64_t rows, const float* x, int64_t ldx,
                                              const uint16_t* panel, int v0, int64_t p0, int64_t p1,
                                              float* y, int64_t ldy) {
  if (rows == R) return panel_tile<R, V>(x, ldx, panel, v0, p0, p1, p0 == 0, y, ldy);
  if constexpr (R > 1) tile_upto<R - 1, V>(rows, x, ldx, panel, v0, p0, p1, y, ldy);
}

// Rows [0, m) x one panel, all k, into y (ldy, kPackedCols valid columns).
PAGODA_AVX2_TARGET void panel_rows(const float* x, int64_t m, const uint16_t* panel, int64_t k,
                                   float* y, int64_t ldy) {
  const int64_t pairs = k / 2;
  if (m == 1) {  // decode: one pass over the panel, all 8 vectors at once
    panel_tile<1, kPanelVectors>(x, k, panel, 0, 0, pairs, true, y, ldy);
    return;
  }
  for (int64_t p0 = 0; p0 < pairs; p0 += kBlockPairs) {
    const int64_t p1 = p0 + kBlockPairs < pairs ? p0 + kBlockPairs : pairs;
    for (int v0 = 0; v0 < kPanelVectors; v0 += kTileVectors) {
      // As few tiles as kTileRows allows, of near-equal rows (m = 32: 5, 5,
      // 5, 5, 4, 4, 4, not 6 x 5 + a 2-row tile with half the reuse).
      const int64_t tiles = (m + kTileRows - 1) / kTileRows;
      for (int64_t t = 0, r = 0; t < tiles; ++t) {
        const int64_t rows = m / tiles + (t < m % tiles ? 1 : 0);
        tile_upto<kTileRows, kTileVectors>(rows, x + r * k, k, panel, v0, p0, p1, y + r * ldy,
                                                ldy);
        r += rows;
      }
    }
  }
}

}  // namespace

PAGODA_AVX2_TARGET void linear_packed(const float* x, int64_t m, const uint16_t* w, int64_t k,
                                      int64_t n, int64_t ldy, const float* bias, float* y,
                                      int64_t p0, int64_t p1) {
  // A panel cut by n is computed into this buffer in row tiles and its
  // valid columns copied out.
  alignas(32) float tail[kTileRows * kPackedCols];
  for (int64_t p = p0; p < p1; ++p) {
    const uint16_t* panel = w + p * (k / 2) * kPairStride;
    const int64_t c0 = p * kPackedCols;
    const int64_t cols = n - c0 < kPackedCols ? n - c0 : kPackedCols;
    if (cols == kPackedCols) {
      panel_rows(x, m, panel, k, y + c0, ldy);
      if (bias) {
        for (int64_t r = 0; r < m; ++r) {
          float* yr = y + r * ldy + c0;
#pragma GCC unroll 8
          for (int v = 0; v < kPanelVectors; ++v) {
            _mm256_storeu_ps(yr + 8 * v, _mm256_add_ps(_mm256_loadu_ps(yr + 8 * v),
                                                       _mm256_loadu_ps(bias + c0 + 8 * v)));
          }
        }
      }
      continue;
    }
    for (int64_t r0 = 0; r0 < m; r0 += kTileRows) {
      const int64_t rows = m - r0 < kTileRows ? m - r0 : kTileRows;
      panel_rows(x + r0 * k, rows, panel, k, tail, kPackedCols);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
          const float s = tail[r * kPackedCols + c];
          y[(r0 + r) * ldy + c0 + c] = bias ? s + bias[c0 + c] : s;
        }
      }
    }
  }
}

}  // namespace pagoda::ops::cpu::avx2_impl
