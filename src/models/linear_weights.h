// Load-time preparation of a linear layer's weight matrix, shared by every
// architecture: int8 with --quantization int8, else as stored; int8 and
// bf16 packed into GEMM panels (ops/packed.h) where that kernel is native,
// unless --no-repack.
#pragma once

#include <cstdint>
#include <vector>

#include "models/quantize.h"
#include "models/weights.h"
#include "ops/ops.h"

namespace pagoda {

// The matrix as the kernels will read it. The source is dropped from
// memory once converted, unless source_still_used (a tied embedding).
ops::Matrix prepare_linear(WeightStore& weights, const ops::Matrix& m,
                           const WeightOptions& options, bool source_still_used = false);

// Row r of a matrix as f32 (FP8 and FP4 dequantised with their scales,
// bf16 widened): the values the kernels compute with.
void matrix_row_f32(const ops::Matrix& m, int64_t r, float* out);

// An f32 copy of m in `storage` (for small matrices whose products must
// not round their inputs: routers, the indexer's head weights).
ops::Matrix f32_copy(const ops::Matrix& m, std::vector<float>& storage);

}  // namespace pagoda
