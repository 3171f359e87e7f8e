// Load-time weight quantization (--quantization): the choice, and int8
// copies of weight matrices with per-output-channel (per row) symmetric
// scales, in the layout ops::linear reads (ops/quant.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "ops/ops.h"

namespace pagoda {

enum class Quantization { None, Int8 };

// How the loader prepares weight matrices (--quantization, --no-repack).
struct WeightOptions {
  WeightOptions(Quantization q = Quantization::None, bool repack_bf16 = true)  // NOLINT: implicit
      : quantization(q), repack(repack_bf16) {}
  Quantization quantization;
  // Unquantized bf16 matrices are packed into panels (ops/packed.h) when the
  // CPU has the kernel for them; false keeps them in place in the mapping.
  bool repack;
};

std::string_view quantization_name(Quantization q);
// "none" or "int8"; anything else throws InputError naming the choices.
Quantization parse_quantization(std::string_view name);

// Bytes an int8 copy of a [rows, cols] matrix takes: the int8 values, then
// the per-row f32 scales and int32 row sums (each 64-byte aligned).
// Packed (ops/packed.h): the values as panels of 64 rows.
size_t int8_matrix_bytes(int64_t rows, int64_t cols, bool packed = false);

// Quantizes an F32, BF16, F8E4M3 or F4E2M1 (dequantised first) matrix into `out` (int8_matrix_bytes bytes, at
// least 4-byte aligned; 64 keeps every vector load within a cache line) and returns the I8 matrix
// that views it. Rows are quantized in parallel with ops::quantize_rows_i8's rounding.
ops::Matrix quantize_matrix_int8(const ops::Matrix& src, void* out);

// The int8 matrix q in panels (ops/packed.h) in `out` (int8_matrix_bytes(
// rows, cols, true), 64-byte aligned), its scales and row sums copied along.
ops::Matrix repack_int8(const ops::Matrix& q, void* out);

// Bytes a matrix occupies in memory, scales and row sums included.
int64_t matrix_bytes(const ops::Matrix& m);

}  // namespace pagoda
