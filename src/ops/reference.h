// Plain scalar twins of every op in ops/ops.h: written for obviousness, not
// speed, and used by tests as the reference the fast kernels must match.
#pragma once

#include "ops/moe.h"
#include "ops/ops.h"

namespace pagoda::ops::ref {

void linear(const float* x, int64_t m, const Matrix& w, const float* bias, float* y,
            int64_t ldy = 0);
void rms_norm(const float* x, const float* weight, int64_t m, int64_t n, float eps, float* y);
void add_rms_norm(float* residual, const float* x, const float* weight, int64_t m, int64_t n,
                  float eps, float* y);
void rope(float* x, int64_t num_tokens, int num_heads, int head_dim, const int32_t* positions,
          const float* inv_freq, int rot_dim);
void rope(float* x, int64_t num_tokens, const int32_t* positions, const float* inv_freq,
          const RopeParams& p);
void layer_norm(const float* x, const float* weight, const float* bias, int64_t m, int64_t n,
                float eps, float* y);
void silu_mul(const float* gate_up, int64_t m, int64_t inter, float* out,
              float swiglu_limit = 0.0f);
void softmax(float* x, int64_t n);
void embedding(const int32_t* ids, int64_t m, const Matrix& table, float* out);
void write_kv(const float* k, const float* v, const int64_t* slot_mapping, int64_t num_tokens,
              const KVLayout& layout, void* k_cache, void* v_cache);
void paged_attention(const float* q, const void* k_cache, const void* v_cache,
                     const KVLayout& layout, const AttentionBatch& batch, int num_q_heads,
                     float scale, float* out);
void write_mla_kv(const float* latent, const float* k_pe, const int64_t* slot_mapping,
                  int64_t num_tokens, const MLALayout& layout, void* cache,
                  int64_t latent_stride = 0, int64_t pe_stride = 0);
void mla_paged_attention(const float* q, const void* cache, const MLALayout& layout,
                         const AttentionBatch& batch, int num_heads, float scale, float* out,
                         const MlaStrides& strides = {});
// DeepSeek V3.2 sparse attention twins (reference_dsa.cpp).
void mla_sparse_attention(const float* q, const void* cache, const MLALayout& layout,
                          const AttentionBatch& batch, const int32_t* topk_slots, int topk,
                          int num_heads, float scale, float* out, const MlaStrides& strides = {});
void write_indexer_k(const float* k, const int64_t* slot_mapping, int64_t num_tokens,
                     const IndexerLayout& layout, void* cache, int64_t k_stride = 0);
// Every causal score materialised (double sums of the f32 key values), then
// a stable sort by descending score (ties: lower position first).
void indexer_topk(const float* q, const float* weights, const void* cache,
                  const IndexerLayout& layout, const AttentionBatch& batch, int num_heads,
                  int topk, int32_t* out_slots, int32_t* out_positions = nullptr,
                  IndexerOrder order = IndexerOrder::Score);

// MoE (moe_reference.cpp). Scores are computed with the same f32 formulas
// as moe_route (1 / (1 + e^-z); softmax as max, exp, sum in index order,
// divide), so that near-equal scores rank the same way; selection is by
// sorting. The experts' forward runs token by token in topk order, in f64.
void moe_route(const float* logits, int64_t num_tokens, const MoeRouting& routing,
               int32_t* topk_ids, float* topk_weights);
void moe_route_hashed(const float* logits, const int32_t* token_ids, int64_t num_tokens,
                      const int32_t* tid2eid, int64_t vocab, const MoeRouting& routing,
                      int32_t* topk_ids, float* topk_weights);
void moe_experts_forward(const float* x, int64_t num_tokens, const int32_t* topk_ids,
                         const float* topk_weights, int top_k, const MoeExpert* experts,
                         int num_experts, float* out, float swiglu_limit = 0.0f);

// Element (row, col) of a weight matrix as f32 (I8: q * scale; F8E4M3:
// f32(e4m3) * its block's scale, rounded once; F4E2M1: the nibble's e2m1
// value * its 32-block's E8M0 scale, exact).
float matrix_at(const Matrix& w, int64_t row, int64_t col);

// Int8 (ops/quant.h, quant_reference.cpp): one row's quantization (returns
// its scale), and the integer linear on quantized activations. The fast
// kernels must match these bit for bit.
float quantize_row_i8(const float* x, int64_t k, int8_t* q);
void linear_i8_quantized(const int8_t* qx, const float* x_scales, int64_t m, const Matrix& w,
                         const float* bias, float* y, int64_t ldy = 0);

}  // namespace pagoda::ops::ref
