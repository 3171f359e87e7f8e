// ops.h write_indexer_k: the indexer key cache's page formats (f32, bf16,
// and the per-page values-then-scales layouts of V3.2's fp8 and V4's MXFP4).
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/parallel.h"
#include "ops/ops.h"

namespace pagoda::ops {
namespace {

// The e2m1 code (sign bit 8) of v, rounded to nearest with ties to the
// even code: the grid's midpoints 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5 go to
// the codes 0, 2, 2, 4, 4, 6, 6 (|v| >= 6 saturates to code 7).
uint8_t e2m1_code(float v) {
  const float a = std::fabs(v);
  uint8_t code;
  if (a <= 0.25f) code = 0;
  else if (a < 0.75f) code = 1;
  else if (a <= 1.25f) code = 2;
  else if (a < 1.75f) code = 3;
  else if (a <= 2.5f) code = 4;
  else if (a < 3.5f) code = 5;
  else if (a <= 5.0f) code = 6;
  else code = 7;
  return std::signbit(v) ? code | 8 : code;
}

// One MXFP4 key (ops.h IndexerLayout F4E2M1): dim / 2 value bytes and
// dim / 32 UE8M0 scale bytes.
void write_mxfp4_key(const float* x, int dim, uint8_t* values, uint8_t* scales) {
  for (int b = 0; b < dim / kFp4Block; ++b) {
    const float* g = x + b * kFp4Block;
    float amax = 0.0f;
    for (int d = 0; d < kFp4Block; ++d) amax = std::fmax(amax, std::fabs(g[d]));
    // The smallest 2^k >= amax / 6 (k >= -126): frexp's m in [0.5, 1) is
    // 0.5 exactly when the quotient is a power of two. amax / 6 in double
    // is close enough that no f32 amax lands within rounding of a power of
    // two, so the exponent is exact.
    int e;
    const double m = std::frexp(std::fmax(double{amax}, 6.0 * 0x1p-126) / 6.0, &e);
    const int k = m == 0.5 ? e - 1 : e;
    scales[b] = static_cast<uint8_t>(k + 127);
    const float inv = std::ldexp(1.0f, -k);  // x / 2^k = x * 2^-k, exact (k <= 126)
    for (int d = 0; d < kFp4Block; d += 2) {
      const uint8_t lo = e2m1_code(g[d] * inv), hi = e2m1_code(g[d + 1] * inv);
      values[(b * kFp4Block + d) / 2] = static_cast<uint8_t>(lo | hi << 4);
    }
  }
}

}  // namespace

void write_indexer_k(const float* k, const int64_t* slot_mapping, int64_t num_tokens,
                     const IndexerLayout& layout, void* cache, int64_t k_stride) {
  const int bs = layout.block_size, dim = layout.head_dim;
  PAGODA_CHECK(bs > 0 && dim > 0, "write_indexer_k: block_size {} head_dim {}", bs, dim);
  PAGODA_CHECK(layout.dtype == DType::F32 || layout.dtype == DType::BF16 ||
                   layout.dtype == DType::F8E4M3 ||
                   (layout.dtype == DType::F4E2M1 && dim % kFp4Block == 0),
               "write_indexer_k: cache dtype {} head_dim {}", dtype_name(layout.dtype), dim);
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
      if (layout.dtype == DType::F4E2M1) {
        auto* bytes = reinterpret_cast<uint8_t*>(page);
        write_mxfp4_key(x, dim, bytes + layout.mxfp4_values_offset(offset),
                        bytes + layout.mxfp4_scales_offset(offset));
      } else if (layout.dtype == DType::F8E4M3) {
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
