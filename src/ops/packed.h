// bf16 weights repacked at load into column panels for the vdpbf16ps GEMM
// (the layout llama.cpp calls "repack" and oneDNN "blocked"): the row-major
// [rows = out_features, cols = in_features] matrix becomes panels of
// kPackedColsBf16 output columns, each panel [cols / 2][kPackedColsBf16][2]:
// for one pair of inputs (2p, 2p + 1), the 48 outputs' weight pairs lie
// side by side in 192 bytes, three zmm registers of 16 (input, input) pairs.
//
// Why: the kernel then broadcasts one pair of activations and multiplies it
// into 48 outputs with 3 full-width loads, so a GEMM reaches ~85% of the
// bf16 peak where dot products over row-major weights (horizontal sums, two
// streams per tile) stay near 50%; a panel is also one contiguous stream
// for decode. Each output is one accumulator chain over the pairs in order,
// whatever the batch or thread split, so rows stay batch-invariant.
//
// Why 48 columns: 8 rows x 3 vectors = 24 zmm accumulators, so a batched
// decode step's 8 rows take a panel in the one pass that streams it from
// memory. 64-column panels needed 8 x 4 = 32 accumulators, more than the
// registers: 6 rows streamed and the other 2 ran a second pass from L2 that
// nothing overlapped (m = 8 over the Qwen3-0.6B shape's 1.19 GB, Zen 4, 2
// threads: ~13% faster as 8 x 3, bench/batched_decode.md, session 22).
//
// AVX2 (packed_avx2.cpp) reads the same panels: a 256-bit load is 8
// columns' pairs (6 loads per pair row), and the even / odd inputs'
// weights are the words shifted left by 16 / masked to their high half,
// exact f32s, so it streams broadcast f32 activations through FMAs the
// same way.
//
// int8 weights (ops/quant.h) pack the same way with 4 inputs per 32-bit
// word, in panels of kPackedColsI8 = 64 columns ([cols / 4][64][4], for
// vpdpbusd, and AVX2's vpmaddubsw + vpmaddwd, which sum the same 4
// products); their scales and row sums stay per row. Rows past `rows` in
// the last panel are zero; cols must be a multiple of the inputs per word.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ops/ops.h"

namespace pagoda::ops {

// Output columns per panel (the kernels' register tiles: see above). A bf16
// matrix's last panel is only as wide as its remaining rows rounded up to
// 16 (one zmm of pairs), so a 1024-row matrix is 21 panels of 48 and one of
// 16, not 22 x 48 with 32 rows of zeros streamed and multiplied; int8
// panels are all 64 wide (rows past `rows` zero).
constexpr int64_t kPackedColsBf16 = 48;
constexpr int64_t kPackedColsI8 = 64;
inline int64_t packed_cols(DType dtype) {
  return dtype == DType::I8 ? kPackedColsI8 : kPackedColsBf16;
}

inline int64_t packed_panels(int64_t rows, DType dtype) {
  return (rows + packed_cols(dtype) - 1) / packed_cols(dtype);
}

// Columns panel `panel` of a packed [rows, *] matrix stores.
inline int64_t packed_panel_cols(int64_t rows, int64_t panel, DType dtype) {
  const int64_t pc = packed_cols(dtype);
  if (dtype == DType::I8) return pc;
  const int64_t left = (rows + 15) / 16 * 16 - panel * pc;
  return left < pc ? left : pc;
}

// Inputs per 32-bit word of a panel: 2 bf16 or 4 int8.
inline int64_t packed_per_word(DType dtype) { return dtype == DType::I8 ? 4 : 2; }

// Bytes of the packed weights (int8: without scales and row sums).
inline size_t packed_bytes(int64_t rows, int64_t cols, DType dtype) {
  const int64_t stored =
      dtype == DType::I8 ? packed_panels(rows, dtype) * kPackedColsI8 : (rows + 15) / 16 * 16;
  return static_cast<size_t>(stored * cols * (4 / packed_per_word(dtype)));
}

// Index (in elements) of weight [row, col] in a packed [rows, cols] matrix:
// its panel after the full ones before it, then its word in the panel's
// row of words for inputs col / per.
inline int64_t packed_index(int64_t row, int64_t col, int64_t rows, int64_t cols,
                            DType dtype = DType::BF16) {
  const int64_t per = packed_per_word(dtype), pc = packed_cols(dtype), panel = row / pc;
  const int64_t width = packed_panel_cols(rows, panel, dtype);
  return panel * pc * cols + ((col / per) * width + row % pc) * per + col % per;
}

// Whether the selected ISA has a kernel for packed bf16 weights (the model
// loader packs only then: avx512bf16 and avx2 / avx2vnni; other ISAs read
// packed weights through a slow portable loop, correct but not worth it).
bool packed_bf16_is_native();
// The same for packed int8 weights (AVX-512 VNNI, AVX-VNNI, AVX2).
bool packed_i8_is_native();

// Packs a row-major BF16 (even cols) or I8 (cols a multiple of 4) matrix
// into `out` (packed_bytes, 64-byte aligned), in parallel; returns the
// packed Matrix viewing `out` (an I8 one keeps src's scales and row sums).
Matrix pack_matrix(const Matrix& src, void* out);

}  // namespace pagoda::ops
