// Load-time preparation of a linear layer's weight matrix, shared by every
// architecture: int8 with --quantization int8, else as stored; int8 and
// bf16 packed into GEMM panels (ops/packed.h) where that kernel is native,
// unless --no-repack.
#pragma once

#include "models/quantize.h"
#include "models/weights.h"
#include "ops/ops.h"

namespace pagoda {

// The matrix as the kernels will read it. The source is dropped from
// memory once converted, unless source_still_used (a tied embedding).
ops::Matrix prepare_linear(WeightStore& weights, const ops::Matrix& m,
                           const WeightOptions& options, bool source_still_used = false);

}  // namespace pagoda
