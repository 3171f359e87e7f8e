// Scalar twins of the DeepSeek V3.2 sparse-attention ops (ops.h "DSA"
// section): written from the definitions, in double where it matters.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "ops/reference.h"

namespace pagoda::ops::ref {

namespace {

// Entry element d of a slot of an MLA cache, as f32.
float mla_at(const void* cache, const MLALayout& layout, int64_t slot, int d) {
  if (layout.dtype == DType::F8E4M3) {  // fp8_ds_mla (ops.h MLALayout)
    const auto* e = static_cast<const uint8_t*>(cache) + slot * layout.entry_bytes();
    const int lora = layout.kv_lora_rank;
    if (d >= lora) {
      uint16_t h;
      std::memcpy(&h, e + layout.fp8_rope_offset() + 2 * (d - lora), 2);
      return bf16_to_f32(h);
    }
    float scale;
    std::memcpy(&scale, e + layout.fp8_scales_offset() + 4 * (d / kMlaFp8Group), 4);
    return f8e4m3_to_f32(e[d]) * scale;
  }
  const int64_t i = layout.entry_offset(slot) + d;
  return layout.dtype == DType::BF16 ? bf16_to_f32(static_cast<const uint16_t*>(cache)[i])
                                     : static_cast<const float*>(cache)[i];
}

}  // namespace

void mla_sparse_attention(const float* q, const void* cache, const MLALayout& layout,
                          const AttentionBatch& batch, const int32_t* topk_slots, int topk,
                          int num_heads, float scale, float* out, const MlaStrides& strides) {
  const int lora = layout.kv_lora_rank, ed = layout.entry_dim();
  const int64_t q_tok = strides.q_token ? strides.q_token : int64_t{num_heads} * ed;
  const int64_t q_head = strides.q_head ? strides.q_head : ed;
  const int64_t o_tok = strides.out_token ? strides.out_token : int64_t{num_heads} * lora;
  const int64_t o_head = strides.out_head ? strides.out_head : lora;
  const int64_t num_tokens = batch.num_seqs > 0 ? batch.query_start_loc[batch.num_seqs] : 0;
  for (int64_t t = 0; t < num_tokens; ++t) {
    std::vector<int64_t> slots;  // the valid entries, in list order
    for (int i = 0; i < topk; ++i) {
      if (topk_slots[t * topk + i] >= 0) slots.push_back(topk_slots[t * topk + i]);
    }
    for (int h = 0; h < num_heads; ++h) {
      const float* qv = q + t * q_tok + h * q_head;
      float* o = out + t * o_tok + h * o_head;
      if (slots.empty()) {
        std::fill(o, o + lora, 0.0f);
        continue;
      }
      std::vector<double> p(slots.size());
      double mx = -INFINITY, sum = 0;
      for (size_t j = 0; j < slots.size(); ++j) {
        double dot = 0;
        for (int d = 0; d < ed; ++d) dot += double{qv[d]} * mla_at(cache, layout, slots[j], d);
        mx = std::max(mx, p[j] = dot * scale);
      }
      for (double& x : p) sum += (x = std::exp(x - mx));
      for (int d = 0; d < lora; ++d) {
        double acc = 0;
        for (size_t j = 0; j < slots.size(); ++j) acc += p[j] * mla_at(cache, layout, slots[j], d);
        o[d] = static_cast<float>(acc / sum);
      }
    }
  }
}

namespace {

// Element d of the key at a slot of an indexer cache, as f32.
float indexer_at(const void* cache, const IndexerLayout& layout, int64_t slot, int d) {
  const char* page = static_cast<const char*>(cache) + slot / layout.block_size * layout.page_step();
  const int offset = static_cast<int>(slot % layout.block_size);
  const int64_t i = int64_t{offset} * layout.head_dim + d;
  switch (layout.dtype) {
    case DType::BF16:
      return bf16_to_f32(reinterpret_cast<const uint16_t*>(page)[i]);
    case DType::F8E4M3: {
      float scale;
      std::memcpy(&scale, page + layout.fp8_scale_offset(offset), sizeof(float));
      return f8e4m3_to_f32(reinterpret_cast<const uint8_t*>(page)[i]) * scale;
    }
    default:
      return reinterpret_cast<const float*>(page)[i];
  }
}

}  // namespace

void write_indexer_k(const float* k, const int64_t* slot_mapping, int64_t num_tokens,
                     const IndexerLayout& layout, void* cache, int64_t k_stride) {
  const int dim = layout.head_dim;
  if (k_stride == 0) k_stride = dim;
  for (int64_t t = 0; t < num_tokens; ++t) {
    const int64_t slot = slot_mapping[t];
    if (slot < 0) continue;
    const float* x = k + t * k_stride;
    char* page = static_cast<char*>(cache) + slot / layout.block_size * layout.page_step();
    const int offset = static_cast<int>(slot % layout.block_size);
    const int64_t i0 = int64_t{offset} * dim;
    if (layout.dtype == DType::F8E4M3) {
      float amax = 0.0f;
      for (int d = 0; d < dim; ++d) amax = std::max(amax, std::fabs(x[d]));
      const float scale = amax > 0.0f ? amax / 448.0f : 1.0f;
      for (int d = 0; d < dim; ++d)
        reinterpret_cast<uint8_t*>(page)[i0 + d] = f32_to_f8e4m3(x[d] / scale);
      std::memcpy(page + layout.fp8_scale_offset(offset), &scale, sizeof(float));
    } else if (layout.dtype == DType::BF16) {
      for (int d = 0; d < dim; ++d) reinterpret_cast<uint16_t*>(page)[i0 + d] = f32_to_bf16(x[d]);
    } else {
      for (int d = 0; d < dim; ++d) reinterpret_cast<float*>(page)[i0 + d] = x[d];
    }
  }
}

void indexer_topk(const float* q, const float* weights, const void* cache,
                  const IndexerLayout& layout, const AttentionBatch& batch, int num_heads,
                  int topk, int32_t* out_slots, int32_t* out_positions, IndexerOrder order) {
  const int bs = layout.block_size, dim = layout.head_dim;
  for (int s = 0; s < batch.num_seqs; ++s) {
    const int64_t q0 = batch.query_start_loc[s], q1 = batch.query_start_loc[s + 1];
    const int32_t* table = batch.block_table(s);
    for (int64_t t = q0; t < q1; ++t) {
      const int64_t n_keys = batch.seq_lens[s] - (q1 - q0) + (t - q0) + 1;
      std::vector<double> score(static_cast<size_t>(n_keys));
      std::vector<float> key(static_cast<size_t>(dim));
      for (int64_t p = 0; p < n_keys; ++p) {
        const int64_t slot = int64_t{table[p / bs]} * bs + p % bs;
        for (int d = 0; d < dim; ++d) key[d] = indexer_at(cache, layout, slot, d);
        double total = 0;
        for (int h = 0; h < num_heads; ++h) {
          double dot = 0;
          for (int d = 0; d < dim; ++d) dot += double{q[(t * num_heads + h) * dim + d]} * key[d];
          total += double{weights[t * num_heads + h]} * std::max(dot, 0.0);
        }
        score[p] = total;
      }
      std::vector<int32_t> order_of(static_cast<size_t>(n_keys));
      for (int64_t p = 0; p < n_keys; ++p) order_of[p] = static_cast<int32_t>(p);
      std::stable_sort(order_of.begin(), order_of.end(),
                       [&](int32_t a, int32_t b) { return score[a] > score[b]; });
      if (order == IndexerOrder::Position && n_keys > 0)
        std::sort(order_of.begin(), order_of.begin() + std::min<int64_t>(topk, n_keys));
      for (int i = 0; i < topk; ++i) {
        const int32_t pos = i < n_keys ? order_of[i] : -1;
        out_slots[t * topk + i] = pos < 0 ? -1 : table[pos / bs] * bs + pos % bs;
        if (out_positions) out_positions[t * topk + i] = pos;
      }
    }
  }
}

}  // namespace pagoda::ops::ref
