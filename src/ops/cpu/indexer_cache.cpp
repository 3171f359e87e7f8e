// ops.h write_indexer_k: the V3.2 indexer key cache's page formats (f32,
// bf16, and the per-page fp8 values-then-scales layout).
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/parallel.h"
#include "ops/ops.h"

namespace pagoda::ops {

void write_indexer_k(const float* k, const int64_t* slot_mapping, int64_t num_tokens,
                     const IndexerLayout& layout, void* cache, int64_t k_stride) {
  const int bs = layout.block_size, dim = layout.head_dim;
  PAGODA_CHECK(bs > 0 && dim > 0, "write_indexer_k: block_size {} head_dim {}", bs, dim);
  PAGODA_CHECK(layout.dtype == DType::F32 || layout.dtype == DType::BF16 ||
                   layout.dtype == DType::F8E4M3,
               "write_indexer_k: cache dtype {}", dtype_name(layout.dtype));
  if (k_stride == 0) k_stride = dim;
  // 128 values per token: scalar conversion is cheap next to the projection
  // that made them; tokens are split across threads.
  parallel_for(num_tokens, 64, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t slot = slot_mapping[t];
      if (slot < 0) continue;  // padding
      const float* x = k + t * k_stride;
      const int64_t block = slot / bs;
      const int offset = static_cast<int>(slot % bs);
      char* page = static_cast<char*>(cache) + block * layout.page_step();
      if (layout.dtype == DType::F8E4M3) {
        float amax = 0.0f;
        for (int d = 0; d < dim; ++d) amax = std::fmax(amax, std::fabs(x[d]));
        // amax maps to e4m3's largest finite value 448; an all-zero key
        // keeps scale 1 (its bytes are zeros either way), never 0/0.
        const float scale = amax > 0.0f ? amax / 448.0f : 1.0f;
        auto* values = reinterpret_cast<uint8_t*>(page + layout.fp8_values_offset(offset));
        for (int d = 0; d < dim; ++d) values[d] = f32_to_f8e4m3(x[d] / scale);
        std::memcpy(page + layout.fp8_scale_offset(offset), &scale, sizeof(float));
      } else if (layout.dtype == DType::BF16) {
        uint16_t* dst = reinterpret_cast<uint16_t*>(page) + int64_t{offset} * dim;
        for (int d = 0; d < dim; ++d) dst[d] = f32_to_bf16(x[d]);
      } else {
        std::memcpy(reinterpret_cast<float*>(page) + int64_t{offset} * dim, x,
                    sizeof(float) * static_cast<size_t>(dim));
      }
    }
  });
}

}  // namespace pagoda::ops
