// The light ops.h entry points (rope, softmax, embedding, write_kv):
// memory-bound or dominated by libm calls, so one portable version serves
// every ISA.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/parallel.h"
#include "ops/cpu/kernels.h"
#include "ops/cpu/rope_impl.h"
#include "ops/ops.h"
#include "ops/packed.h"

namespace pagoda::ops {

void rope(float* x, int64_t num_tokens, int num_heads, int head_dim, const int32_t* positions,
          const float* inv_freq, int rot_dim) {
  PAGODA_CHECK(rot_dim % 2 == 0 && rot_dim <= head_dim, "rope: rot_dim {} head_dim {}", rot_dim,
               head_dim);
  const int half = rot_dim / 2;
  parallel_for(num_tokens, 4, [&](int64_t t0, int64_t t1) {
    cpu::RopeScratch scratch(half);
    float* cos_v = scratch.cos_v();
    float* sin_v = scratch.sin_v();
    for (int64_t t = t0; t < t1; ++t) {
      cpu::rope_angles(positions[t], inv_freq, half, cos_v, sin_v);
      for (int h = 0; h < num_heads; ++h)
        cpu::rope_head(x + (t * num_heads + h) * head_dim, cos_v, sin_v, half);
    }
  });
}

void rope_cos_sin(const int32_t* positions, int64_t num_tokens, const float* inv_freq, int half,
                  float* out) {
  PAGODA_CHECK(half >= 0, "rope_cos_sin: {} pairs", half);
  parallel_for(num_tokens, 16, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* cos_v = out + t * 2 * half;
      cpu::rope_angles(positions[t], inv_freq, half, cos_v, cos_v + half);
    }
  });
}

void rope(float* x, int64_t num_tokens, const int32_t* positions, const float* inv_freq,
          const RopeParams& p) {
  PAGODA_CHECK(p.num_heads > 0 && p.rot_dim > 0 && p.rot_dim % 2 == 0 && p.offset >= 0 &&
                   p.offset + p.rot_dim <= p.head_dim,
               "rope: {} heads of {}, rotating [{}, {})", p.num_heads, p.head_dim, p.offset,
               p.offset + p.rot_dim);
  const int64_t token_stride = p.token_stride ? p.token_stride : int64_t{p.num_heads} * p.head_dim;
  PAGODA_CHECK(token_stride >= int64_t{p.num_heads} * p.head_dim, "rope: token stride {} < {}",
               token_stride, int64_t{p.num_heads} * p.head_dim);
  const int half = p.rot_dim / 2;
  const bool interleaved = p.layout == RopeLayout::Interleaved;
  const cpu::KernelTable& kt = cpu::active_kernels();
  parallel_for(num_tokens, 4, [&](int64_t t0, int64_t t1) {
    cpu::RopeScratch scratch(p.rot_dim);  // rot_dim cosines and sines (interleaved)
    float* cs = scratch.cos_v();
    float* sn = scratch.sin_v();
    for (int64_t t = t0; t < t1; ++t) {
      // Once per token, shared by every head: ops::rope's angles.
      cpu::rope_angles(positions[t], inv_freq, half, cs, sn);
      if (p.inverse) {
        for (int i = 0; i < half; ++i) sn[i] = -sn[i];
      }
      if (interleaved) {  // spread to one entry per element, sines signed
        for (int i = half - 1; i >= 0; --i) {
          cs[2 * i + 1] = cs[2 * i] = cs[i];
          sn[2 * i + 1] = sn[i];
          sn[2 * i] = -sn[i];
        }
      }
      float* row = x + t * token_stride + p.offset;
      for (int h = 0; h < p.num_heads; ++h)
        kt.rope_slice(row + int64_t{h} * p.head_dim, cs, sn, p.rot_dim, interleaved);
    }
  });
}

void softmax(float* x, int64_t n) {
  if (n <= 0) return;
  float mx = x[0];
  for (int64_t i = 1; i < n; ++i) mx = std::max(mx, x[i]);
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += (x[i] = std::exp(x[i] - mx));
  const float inv = 1.0f / sum;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void embedding(const int32_t* ids, int64_t m, const Matrix& table, float* out) {
  PAGODA_CHECK(table.dtype == DType::F32 || table.dtype == DType::BF16, "embedding: dtype {}",
               dtype_name(table.dtype));
  const int64_t d = table.cols;
  for (int64_t i = 0; i < m; ++i) {
    PAGODA_CHECK(ids[i] >= 0 && ids[i] < table.rows, "token id {} outside [0, {})", ids[i],
                 table.rows);
    float* o = out + i * d;
    if (table.packed) {  // a tied LM head's packed copy: one column of its panel
      const auto* words = static_cast<const uint16_t*>(table.data);
      for (int64_t j = 0; j < d; ++j)
        o[j] = bf16_to_f32(words[packed_index(ids[i], j, table.rows, d)]);
    } else if (table.dtype == DType::BF16) {
      const auto* row = static_cast<const uint16_t*>(table.data) + int64_t{ids[i]} * d;
      for (int64_t j = 0; j < d; ++j) o[j] = bf16_to_f32(row[j]);
    } else {
      std::memcpy(o, static_cast<const float*>(table.data) + int64_t{ids[i]} * d,
                  d * sizeof(float));
    }
  }
}

void write_kv(const float* k, const float* v, const int64_t* slot_mapping, int64_t num_tokens,
              const KVLayout& layout, void* k_cache, void* v_cache) {
  PAGODA_CHECK(layout.dtype == DType::F32 || layout.dtype == DType::BF16,
               "write_kv: KV cache dtype {}", dtype_name(layout.dtype));
  const int64_t row = int64_t{layout.num_kv_heads} * layout.head_dim;
  for (int64_t t = 0; t < num_tokens; ++t) {
    if (slot_mapping[t] < 0) continue;  // padding token
    cpu::write_kv_token(k + t * row, v + t * row, slot_mapping[t], layout, k_cache, v_cache);
  }
}

}  // namespace pagoda::ops
