// Scalar twins of the DeepSeek V3.2 sparse-attention ops (ops.h "DSA"
// section): written from the definitions, in double where it matters.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/reference.h"

namespace pagoda::ops::ref {

namespace {

// Entry element d of a slot of an MLA cache, as f32.
float mla_at(const void* cache, const MLALayout& layout, int64_t slot, int d) {
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

}  // namespace pagoda::ops::ref
