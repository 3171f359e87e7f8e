// bf16 weights repacked at load into column panels for the vdpbf16ps GEMM
// (the layout llama.cpp calls "repack" and oneDNN "blocked"): the row-major
// [rows = out_features, cols = in_features] matrix becomes panels of
// kPackedCols output columns, each panel [cols / 2][kPackedCols][2]: for one
// pair of inputs (2p, 2p + 1), the kPackedCols outputs' weight pairs lie
// side by side in 256 bytes, four zmm registers of 16 (input, input) pairs.
//
// Why: the kernel then broadcasts one pair of activations and multiplies it
// into 64 outputs with 4 full-width loads, so a GEMM reaches ~85% of the
// bf16 peak where dot products over row-major weights (horizontal sums, two
// streams per tile) stay near 50%; a panel is also one contiguous stream
// for decode. Each output is one accumulator chain over the pairs in order,
// whatever the batch or thread split, so rows stay batch-invariant.
//
// AVX2 (packed_avx2.cpp) reads the same panels: a 256-bit load is 8
// columns' pairs, and the even / odd inputs' weights are the words shifted
// left by 16 / masked to their high half, exact f32s, so it streams
// broadcast f32 activations through FMAs the same way.
//
// int8 weights (ops/quant.h) pack the same way with 4 inputs per 32-bit
// word ([cols / 4][kPackedCols][4], for vpdpbusd, and AVX2's vpmaddubsw +
// vpmaddwd, which sum the same 4 products); their scales and row
// sums stay per row. Rows past `rows` in the last panel are zero; cols
// must be a multiple of the inputs per word.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ops/ops.h"

namespace pagoda::ops {

constexpr int64_t kPackedCols = 64;

inline int64_t packed_panels(int64_t rows) { return (rows + kPackedCols - 1) / kPackedCols; }

// Inputs per 32-bit word of a panel: 2 bf16 or 4 int8.
inline int64_t packed_per_word(DType dtype) { return dtype == DType::I8 ? 4 : 2; }

// Bytes of the packed weights (int8: without scales and row sums).
inline size_t packed_bytes(int64_t rows, int64_t cols, DType dtype) {
  return static_cast<size_t>(packed_panels(rows) * kPackedCols * cols *
                             (4 / packed_per_word(dtype)));
}

// Index (in elements) of weight [row, col] in a packed matrix.
inline int64_t packed_index(int64_t row, int64_t col, int64_t cols, DType dtype = DType::BF16) {
  const int64_t per = packed_per_word(dtype);
  return ((row / kPackedCols * (cols / per) + col / per) * kPackedCols + row % kPackedCols) * per +
         col % per;
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
