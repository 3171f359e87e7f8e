// DeepSeek V3.2's lightning indexer (spec §3.1.3, seed 001): per layer, a
// cheap scorer that picks, for every query token, the index_topk cached
// tokens its sparse MLA attention will read. One key per token (index_head_dim
// values after LayerNorm, RoPE on its first rope dims in half-split pairs
// and a Hadamard rotation) lives in its own typed cache, in the same logical
// blocks as the MLA latents, so prefix caching, chunked prefill and
// preemption need no special path. Under tensor parallelism the indexer is
// replicated on every rank (its weights are small; every rank then picks
// the same tokens), as vLLM does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/deepseek_config.h"
#include "models/model.h"
#include "models/weights.h"
#include "ops/ops.h"

namespace pagoda {

class LightningIndexer {
 public:
  // Loads `prefix` + wq_b / wk / k_norm / weights_proj (HF names under
  // self_attn.indexer.). q_lora_rank must be > 0 (the indexer reads c_q).
  LightningIndexer(WeightStore& weights, const std::string& prefix, const ModelConfig& config,
                   const DeepseekConfig& ds, const std::vector<float>& inv_freq);

  // The key cache spec of one layer for a cache of kv_dtype.
  static KVCacheSpec cache_spec(const DeepseekConfig& ds, DType kv_dtype);

  // Writes the step's tokens' keys into `cache` (every token's, before any
  // select of the step reads them). x: the layer's normalised input
  // [tokens, hidden].
  void write_keys(const float* x, const BatchMetadata& batch, const KVGroupMetadata& group,
                  void* cache, const KVCacheView& kv, int64_t tokens);
  // Fills topk_positions [tokens, index_topk] with the positions (in its
  // own sequence) of the cached tokens each token attends to (-1 padded).
  // x as for write_keys; c_q: the q LoRA output after q_a_layernorm
  // [tokens, q_lora_rank].
  void select(const float* x, const float* c_q, const BatchMetadata& batch,
              const KVGroupMetadata& group, const void* cache, const KVCacheView& kv,
              int64_t tokens, int32_t* topk_positions);

 private:
  void reserve(int64_t tokens);

  const DeepseekConfig& ds_;
  const std::vector<float>& inv_freq_;
  int64_t hidden_ = 0;
  ops::Matrix wq_b_, wk_, weights_proj_;
  std::vector<float> weights_proj_data_;  // f32: the head weights are fp32 (HF)
  const float* k_norm_weight_ = nullptr;
  const float* k_norm_bias_ = nullptr;
  float eps_ = 1e-6f;
  std::vector<float> q_, k_, w_;
  std::vector<int32_t> key_slots_;  // the picks' slots in the indexer's own cache (unused)
  int64_t capacity_ = 0;
};

// In-place orthonormal Hadamard rotation of each of `rows` vectors of n
// values (n a power of two): v <- v Hd_n / sqrt(n), Sylvester order
// (spec §0.5).
void hadamard_rotate(float* v, int64_t rows, int64_t n);

}  // namespace pagoda
