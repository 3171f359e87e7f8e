// The GEMM/GEMV over packed bf16 weights (ops/packed.h) with f32
// activations, for ISAs without a bf16 dot product: written once against
// vec_<isa>.h and compiled per ISA like kernels_impl.h (packed_avx2.cpp:
// ymm, packed_avx512.cpp: zmm). A vector load of a panel's pair row holds
// kLanes columns' (even, odd) bf16 pairs, widened to two exact f32 vectors
// by 2 integer ops (vload_bf16_pairs) shared by every row of the tile; the
// tile streams broadcast activations into kWidenTileRows x
// kWidenTileVectors f32 accumulators. The includer defines, in namespace
// pagoda::ops::PAGODA_ISA, kWidenTileRows, kWidenTileVectors (dividing
// kPackedColsBf16 / kLanes) and kWidenBlockPairs.
//
// Determinism: output [r, c] is one accumulator chain over the pairs p =
// 0, 1, ... in order, fma(x[2p], w_even) then fma(x[2p + 1], w_odd), from
// +0, then + bias, in every tile shape, vector width, k block and thread
// split: rows do not depend on the batch, and the AVX2 and AVX-512 kernels
// give the same bits. Between k blocks the partial sums rest in y as f32,
// which is exact.
#ifndef PAGODA_ISA
#error "define PAGODA_ISA before including packed_widen_impl.h"
#endif

#include "ops/cpu/packed_panels.h"
#include "ops/packed.h"

namespace pagoda::ops::PAGODA_ISA {
namespace {

constexpr int kPanelVectors = kPackedColsBf16 / kLanes;  // vectors per full panel's pair row
static_assert(kPanelVectors % kWidenTileVectors == 0);
// bf16 elements per pair row of a panel of PV vectors (kPanelVectors, or
// fewer for a matrix's narrower last panel).
template <int PV>
constexpr int64_t kPairStride = int64_t{PV} * kLanes * 2;
// A column group's vectors in a panel of PV: kWidenTileVectors where they
// divide it, else the whole (narrower) panel.
template <int PV>
constexpr int kGroupVectors = PV % kWidenTileVectors == 0 ? kWidenTileVectors : PV;

// Cache lines of one pair row's V vectors.
template <int V>
constexpr int kLinesPerPair = (V * kLanes * 4 + 63) / 64;

// acc[r][v] (+)= sum over pairs [p0, p1) of x row r's pair times vectors
// [v0, v0 + V) of the pair rows of a panel of PV vectors; y rows at
// y + r * ldy (columns from the panel's first). Meanwhile the first ahead_pairs pairs of the
// next column group (same layout, from `ahead`) are asked for, so a small
// batch's first tile of a group does not wait on memory. Not inlined, as
// packed_avx512bf16.cpp's tile.
template <int R, int V, int PV>
__attribute__((noinline)) PAGODA_TARGET void panel_tile(
    const float* x, int64_t ldx, const uint16_t* panel, int v0, int64_t p0, int64_t p1, bool first,
    float* y, int64_t ldy, const uint16_t* ahead = nullptr, int64_t ahead_pairs = 0) {
  Vec acc[R][V];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v)
      acc[r][v] = first ? vzero() : vload(y + r * ldy + kLanes * (v0 + v));
  }
  const uint16_t* b = panel + p0 * kPairStride<PV> + 2 * kLanes * v0;
  for (int64_t p = p0; p < p1; ++p, b += kPairStride<PV>) {
    if constexpr (R == 1) {
      // A lone row (decode) is bound by streaming the panel: ask for all
      // the lines of the pair row 4 KiB ahead (as the AVX-512 BF16 kernel
      // does).
#pragma GCC unroll 4
      for (int l = 0; l < kLinesPerPair<PV>; ++l) __builtin_prefetch(b + 2048 + 32 * l, 0, 1);
    }
    if (p - p0 < ahead_pairs) {
#pragma GCC unroll 4
      for (int l = 0; l < kLinesPerPair<V>; ++l)
        __builtin_prefetch(ahead + (p - p0) * kPairStride<PV> + 32 * l, 0, 3);
    }
    Vec even[V], odd[V];
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) vload_bf16_pairs(b + 2 * kLanes * v, even[v], odd[v]);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const Vec x0 = vbroadcast_here(x + r * ldx + 2 * p);
      const Vec x1 = vbroadcast_here(x + r * ldx + 2 * p + 1);
#pragma GCC unroll 8
      for (int v = 0; v < V; ++v) {
        acc[r][v] = vfma(x0, even[v], acc[r][v]);
        acc[r][v] = vfma(x1, odd[v], acc[r][v]);
      }
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) vstore(y + r * ldy + kLanes * (v0 + v), acc[r][v]);
  }
}

// panel_tile<rows, V, PV> for a runtime rows in [1, R].
template <int R, int V, int PV>
PAGODA_TARGET inline void tile_upto(int64_t rows, const float* x, int64_t ldx,
                                    const uint16_t* panel, int v0, int64_t p0, int64_t p1, float* y,
                                    int64_t ldy, const uint16_t* ahead, int64_t ahead_pairs) {
  if (rows == R)
    return panel_tile<R, V, PV>(x, ldx, panel, v0, p0, p1, p0 == 0, y, ldy, ahead, ahead_pairs);
  if constexpr (R > 1)
    tile_upto<R - 1, V, PV>(rows, x, ldx, panel, v0, p0, p1, y, ldy, ahead, ahead_pairs);
}

// Rows [0, m) x one panel of PV vectors, all k, into y (ldy).
template <int PV>
PAGODA_TARGET void panel_rows(const float* x, int64_t m, const uint16_t* panel, int64_t k, float* y,
                              int64_t ldy) {
  constexpr int kGroup = kGroupVectors<PV>;
  const int64_t pairs = k / 2;
  if (m == 1) {  // decode: one pass over the panel, the whole pair row at once
    panel_tile<1, PV, PV>(x, k, panel, 0, 0, pairs, true, y, ldy);
    return;
  }
  for (int64_t p0 = 0; p0 < pairs; p0 += kWidenBlockPairs) {
    const int64_t p1 = p0 + kWidenBlockPairs < pairs ? p0 + kWidenBlockPairs : pairs;
    for (int v0 = 0; v0 < PV; v0 += kGroup) {
      // The column group after this one: the next in the block, else the
      // next block's first (the next panel's, which follows in memory,
      // after the last block; a prefetch past the matrix is harmless).
      const bool last_group = v0 + kGroup >= PV;
      const uint16_t* next = last_group ? panel + p1 * kPairStride<PV>
                                        : panel + p0 * kPairStride<PV> + 2 * kLanes * (v0 + kGroup);
      const int64_t next_pairs = last_group ? kWidenBlockPairs : p1 - p0;
      // As few tiles as kWidenTileRows allows, of near-equal rows (AVX2's 5
      // rows at m = 32: 5, 5, 5, 5, 4, 4, 4, not 6 x 5 + a 2-row tile with
      // a third of the reuse); each asks for a slice of the next group.
      const int64_t tiles = (m + kWidenTileRows - 1) / kWidenTileRows;
      const int64_t slice = (next_pairs + tiles - 1) / tiles;
      for (int64_t t = 0, r = 0; t < tiles; ++t) {
        const int64_t rows = m / tiles + (t < m % tiles ? 1 : 0);
        const int64_t s0 = t * slice < next_pairs ? t * slice : next_pairs;
        const int64_t s1 = s0 + slice < next_pairs ? s0 + slice : next_pairs;
        tile_upto<kWidenTileRows, kGroup, PV>(rows, x + r * k, k, panel, v0, p0, p1, y + r * ldy,
                                              ldy, next + s0 * kPairStride<PV>, s1 - s0);
        r += rows;
      }
    }
  }
}

// A panel of `units` x 16 columns: 3, or 1-2 for a matrix's narrower last.
PAGODA_TARGET void panel_rows_of(const float* x, int64_t m, const uint16_t* panel, int64_t k,
                                 float* y, int64_t ldy, int units) {
  constexpr int kPerUnit = 16 / kLanes;  // vectors per 16 columns
  static_assert(kPanelVectors == 3 * kPerUnit);
  if (units == 3) return panel_rows<3 * kPerUnit>(x, m, panel, k, y, ldy);
  if (units == 2) return panel_rows<2 * kPerUnit>(x, m, panel, k, y, ldy);
  panel_rows<kPerUnit>(x, m, panel, k, y, ldy);
}

}  // namespace

// y's columns of panels [p0, p1) (KernelTable::linear_bf16_packed_f32).
void linear_packed_widen(const float* x, int64_t m, const uint16_t* w, int64_t k, int64_t n,
                         int64_t ldy, const float* bias, float* y, int64_t p0, int64_t p1) {
  cpu::linear_panels<kWidenTileRows>(panel_rows_of, x, m, w, k, n, ldy, bias, y, p0, p1);
}

}  // namespace pagoda::ops::PAGODA_ISA
