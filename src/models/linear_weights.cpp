#include "models/linear_weights.h"

#include "ops/packed.h"

namespace pagoda {

ops::Matrix prepare_linear(WeightStore& weights, const ops::Matrix& m,
                           const WeightOptions& options, bool source_still_used) {
  if (options.quantization == Quantization::Int8) {
    const ops::Matrix q = weights.quantize_int8(m, source_still_used);
    if (options.repack && q.cols % 4 == 0 && ops::packed_i8_is_native()) {
      return weights.repack(q, false);
    }
    return q;
  }
  if (options.repack && m.dtype == DType::BF16 && m.cols % 2 == 0 && ops::packed_bf16_is_native()) {
    return weights.repack(m, source_still_used);
  }
  return m;
}

}  // namespace pagoda
