// The panel loop every packed bf16 GEMM shares (packed_widen_impl.h for
// AVX2 / AVX-512, packed_avx512bf16.cpp): whole panels are computed
// straight into y; a panel cut by n (the matrix's last) goes through a
// buffer of tile_rows rows at a time, whose valid columns are copied out.
//
// Plain C++ with no target attribute (GCC would not inline a caller
// without the kernels' target into them, nor a targeted template through a
// lambda): panel_rows is the ISA's own targeted function, called, and the
// bias add is one f32 add per output, the same bits in any instruction set.
#pragma once

#include <cstdint>

#include "ops/packed.h"

namespace pagoda::ops::cpu {

// panel_rows(x, rows, panel, k, y, ldy, units): rows [0, rows) x one panel
// of `units` x 16 columns (3, or 1-2 for a matrix's narrower last panel:
// ops/packed.h), all k, into y (row stride ldy), at most tile_rows rows
// when y is the cut-panel buffer. X: the activation element (f32, or bf16
// for a bf16 dot product).
template <int64_t tile_rows, typename X, typename PanelRows>
inline void linear_panels(PanelRows panel_rows, const X* x, int64_t m, const uint16_t* w, int64_t k,
                          int64_t n, int64_t ldy, const float* bias, float* y, int64_t p0,
                          int64_t p1) {
  alignas(64) float tail[tile_rows * kPackedColsBf16];
  for (int64_t p = p0; p < p1; ++p) {
    // The panels before p are full: k / 2 pairs of 2 x kPackedColsBf16.
    const uint16_t* panel = w + p * k * kPackedColsBf16;
    const int64_t c0 = p * kPackedColsBf16;
    const int64_t cols = n - c0 < kPackedColsBf16 ? n - c0 : kPackedColsBf16;
    const int units = static_cast<int>(packed_panel_cols(n, p, DType::BF16) / 16);
    if (cols == units * 16) {
      panel_rows(x, m, panel, k, y + c0, ldy, units);
      if (bias) {
        for (int64_t r = 0; r < m; ++r) {
          float* yr = y + r * ldy + c0;
          for (int64_t c = 0; c < cols; ++c) yr[c] += bias[c0 + c];
        }
      }
      continue;
    }
    for (int64_t r0 = 0; r0 < m; r0 += tile_rows) {
      const int64_t rows = m - r0 < tile_rows ? m - r0 : tile_rows;
      panel_rows(x + r0 * k, rows, panel, k, tail, kPackedColsBf16, units);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
          const float s = tail[r * kPackedColsBf16 + c];
          y[(r0 + r) * ldy + c0 + c] = bias ? s + bias[c0 + c] : s;
        }
      }
    }
  }
}

}  // namespace pagoda::ops::cpu
