// The GEMM/GEMV over packed bf16 weights (ops/packed.h) with vdpbf16ps:
// a tile is kTileRows activation rows x one 48-column panel = 24 zmm
// accumulators; per input pair it loads the panel's 3 vectors once and
// multiplies each into every row's broadcast activation pair.
//
// Determinism: output [r, c] is one accumulator chain over the pairs
// p = 0, 1, ... in order, from +0, then + bias, in every tile shape (1 to 8
// rows), k block and thread split: rows do not depend on the batch. Between
// k blocks the partial sums rest in y as f32, which is exact.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "ops/cpu/kernels.h"
#include "ops/cpu/packed_panels.h"
#include "ops/packed.h"

#define PAGODA_BF16_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma")))

namespace pagoda::ops::cpu::avx512bf16_impl {
namespace {

constexpr int kVectors = kPackedColsBf16 / 16;  // zmm per panel row
// 8 x 3 accumulators + 3 panel vectors + a broadcast: a batched decode
// step's 8 rows stream a panel in one pass (ops/packed.h).
constexpr int kTileRows = 8;
// Pairs per k block: the panel's block (kBlockPairs x 192 bytes = 96 KiB)
// stays in L2 while every row tile passes over it, and the partial sums
// are stored and reloaded only once per block.
constexpr int64_t kBlockPairs = 512;
// bf16 elements per pair row of a panel of V vectors (kVectors, or 1-2 for
// a matrix's narrower last panel).
template <int V>
constexpr int64_t kPairStride = V * 32;
// How far ahead (bf16 elements) a tile of R rows that streams its block from
// memory asks for the panel's lines: far enough that the lines in flight
// cover the memory latency at the rate the tile consumes them. A lone row
// (decode) is bound by the stream and its own loads run ahead, so 4 KiB. A
// tile of more than 4 rows (6 and 8 measured) spends 15-24 vdpbf16ps on a
// pair row, so few of its own loads are in flight and 4 KiB left it short
// of the bandwidth: m = 6 and 8 steps of linear_stream_bench took 30.3-34.2
// ms (median 32.3) at 4 KiB, 25.4-30.2 (26.2) at 8 KiB and 25.5-28.5 (26.6)
// at 12 KiB in the high-bandwidth state (read probe 50-60 GB/s; the
// distance alternated step by step), and were even at ~31 GB/s; at 4 rows 4
// and 8 KiB were even, and at 1 row 8 KiB was slower (Zen 4,
// bench/batched_decode.md session 27).
template <int R>
constexpr int64_t kStreamAhead = R <= 4 ? 2048 : 4096;

// acc[r][v] (+)= sum over pairs [p0, p1) of x row r's pair times the panel's
// pair (V vectors), for rows x + r * ldx; y rows at y + r * ldy
// (panel-local columns).
// `stream`: this tile is the first over the block, which it reads from
// memory (the others find it in L2). `ahead` (may be null): bytes to
// prefetch into L2 meanwhile, one line per pair. Not inlined: inside its
// callers' loops at -O3 the tile ran out of general registers and reloaded
// row offsets from the stack every pair (~3% of a batched decode step).
template <int R, int V>
__attribute__((noinline)) PAGODA_BF16_TARGET void panel_tile(const uint16_t* x, int64_t ldx,
                                                             const uint16_t* panel, int64_t p0,
                                                             int64_t p1, bool first, float* y,
                                                             int64_t ldy, bool stream,
                                                             const char* ahead) {
  __m512 acc[R][V];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v)
      acc[r][v] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(y + r * ldy + 16 * v);
  }
  const uint16_t* b = panel + p0 * kPairStride<V>;
  for (int64_t p = p0; p < p1; ++p, b += kPairStride<V>) {
    __m512bh w[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) w[v] = (__m512bh)_mm512_loadu_si512(b + 32 * v);
    if (ahead) __builtin_prefetch(ahead + (p - p0) * 64, 0, 1);
    if (stream) {
      // The stream from memory: ask for all three lines of the pair row
      // kStreamAhead<R> ahead, into L2 (locality 1). A lone row (decode) is
      // bound by it: asking for one line in four, or with the non-temporal
      // hint, left it at ~70% of the read probe on Zen 4; this keeps it
      // near 90%. At a few rows (batched decode) the hardware prefetcher
      // alone also lags the tile's arithmetic: m = 8 steps of
      // linear_stream_bench took 34.1-41.2 ms without, 30.9-36.8 with (Zen
      // 5, interleaved pairs).
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) __builtin_prefetch(b + kStreamAhead<R> + 32 * v, 0, 1);
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      int32_t pair;
      std::memcpy(&pair, x + r * ldx + 2 * p, sizeof pair);
      const __m512bh a = (__m512bh)_mm512_set1_epi32(pair);
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], a, w[v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) _mm512_storeu_ps(y + r * ldy + 16 * v, acc[r][v]);
  }
}

// panel_tile<rows, V> for a runtime rows in [1, R].
template <int R, int V>
PAGODA_BF16_TARGET inline void remainder_tile(int64_t rows, const uint16_t* x, int64_t ldx,
                                              const uint16_t* panel, int64_t p0, int64_t p1,
                                              float* y, int64_t ldy, bool stream,
                                              const char* ahead) {
  if (rows == R) return panel_tile<R, V>(x, ldx, panel, p0, p1, p0 == 0, y, ldy, stream, ahead);
  if constexpr (R > 1) remainder_tile<R - 1, V>(rows, x, ldx, panel, p0, p1, y, ldy, stream, ahead);
}

// Rows [0, m) x one panel of V vectors, all k, into y (ldy).
template <int V>
PAGODA_BF16_TARGET void panel_rows(const uint16_t* x, int64_t m, const uint16_t* panel, int64_t k,
                                   float* y, int64_t ldy) {
  constexpr int64_t kBlockBytes = kBlockPairs * kPairStride<V> * 2;
  const int64_t pairs = k / 2;
  for (int64_t p0 = 0; p0 < pairs; p0 += kBlockPairs) {
    const int64_t p1 = p0 + kBlockPairs < pairs ? p0 + kBlockPairs : pairs;
    // The first row tile reads the block from memory, the others from L2:
    // those ask for slices of the next block (which follows in memory, in
    // this panel or the next), so its first tile finds it in L2 too.
    const char* next = reinterpret_cast<const char*>(panel + p1 * kPairStride<V>);
    auto ahead = [&](int64_t r) -> const char* {
      const int64_t slice = r / kTileRows - 1, slice_bytes = (p1 - p0) * 64;
      return slice >= 0 && slice * slice_bytes < kBlockBytes ? next + slice * slice_bytes : nullptr;
    };
    int64_t r = 0;
    for (; r + kTileRows <= m; r += kTileRows)
      panel_tile<kTileRows, V>(x + r * k, k, panel, p0, p1, p0 == 0, y + r * ldy, ldy, r == 0,
                               ahead(r));
    // The remaining rows as one narrower tile: one pass over the block.
    if (r < m) {
      remainder_tile<kTileRows - 1, V>(m - r, x + r * k, k, panel, p0, p1, y + r * ldy, ldy, r == 0,
                                       ahead(r));
    }
  }
}

// A panel of `units` vectors: 3, or 1-2 for a matrix's narrower last one.
PAGODA_BF16_TARGET void panel_rows_of(const uint16_t* x, int64_t m, const uint16_t* panel,
                                      int64_t k, float* y, int64_t ldy, int units) {
  static_assert(kVectors == 3);
  if (units == 3) return panel_rows<3>(x, m, panel, k, y, ldy);
  if (units == 2) return panel_rows<2>(x, m, panel, k, y, ldy);
  panel_rows<1>(x, m, panel, k, y, ldy);
}

}  // namespace

PAGODA_BF16_TARGET void pack_panel(const uint32_t* rows, int64_t count, int64_t pairs, int64_t cols,
                                   uint32_t* panel) {
  // One gather per 16 rows and pair: the pair's words of 16 source rows
  // (row stride `pairs` words) land side by side as the panel wants them.
  const __m512i offsets =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(static_cast<int32_t>(pairs)));
  for (int64_t c = 0; c < cols; c += 16) {
    const int64_t valid = count - c < 16 ? (count - c > 0 ? count - c : 0) : 16;
    const auto mask = static_cast<__mmask16>((1u << valid) - 1);
    const uint32_t* base = rows + (valid > 0 ? c * pairs : 0);
    for (int64_t p = 0; p < pairs; ++p) {
      const __m512i v =
          _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), mask, offsets, base + p, 4);
      _mm512_storeu_si512(panel + p * cols + c, v);
    }
  }
}

void linear_packed(const uint16_t* x, int64_t m, const uint16_t* w, int64_t k, int64_t n,
                   int64_t ldy, const float* bias, float* y, int64_t p0, int64_t p1) {
  linear_panels<kTileRows>(panel_rows_of, x, m, w, k, n, ldy, bias, y, p0, p1);
}

}  // namespace pagoda::ops::cpu::avx512bf16_impl
