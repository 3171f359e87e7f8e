#include "models/deepseek_indexer.h"

#include <cmath>

#include <fmt/format.h>

#include "core/error.h"
#include "models/linear_weights.h"

namespace pagoda {

void hadamard_rotate(float* v, int64_t rows, int64_t n) {
  PAGODA_CHECK(n > 0 && (n & (n - 1)) == 0, "Hadamard size {} is not a power of two", n);
  const float norm = 1.0f / std::sqrt(static_cast<float>(n));
  for (int64_t r = 0; r < rows; ++r) {
    float* x = v + r * n;
    // Fast Walsh-Hadamard transform in Sylvester order: butterflies of
    // growing span (Hd_2n = [[Hd, Hd], [Hd, -Hd]]).
    for (int64_t span = 1; span < n; span *= 2) {
      for (int64_t i = 0; i < n; i += 2 * span) {
        for (int64_t j = i; j < i + span; ++j) {
          const float a = x[j], b = x[j + span];
          x[j] = a + b;
          x[j + span] = a - b;
        }
      }
    }
    for (int64_t i = 0; i < n; ++i) x[i] *= norm;
  }
}

KVCacheSpec LightningIndexer::cache_spec(const DeepseekConfig& ds, DType kv_dtype) {
  KVCacheSpec spec;
  if (kv_dtype == DType::F8E4M3) {  // per page: the e4m3 values, then one f32 scale a token
    spec.entry_bytes = ds.index_head_dim + 4;
    spec.format = fmt::format("indexer_k fp8 {}", ds.index_head_dim);
  } else {
    spec.entry_bytes = ds.index_head_dim * static_cast<int64_t>(dtype_size(kv_dtype));
    spec.format = fmt::format("indexer_k {} {}", ds.index_head_dim, dtype_name(kv_dtype));
  }
  return spec;
}

LightningIndexer::LightningIndexer(WeightStore& weights, const std::string& prefix,
                                   const ModelConfig& config, const DeepseekConfig& ds,
                                   const std::vector<float>& inv_freq)
    : ds_(ds),
      inv_freq_(inv_freq),
      hidden_(config.hidden_size),
      eps_(1e-6f) {
  if (ds.q_lora_rank <= 0) {
    throw_input_error("the lightning indexer needs q_lora_rank > 0 (it reads the q LoRA output)");
  }
  const int64_t hi = ds.index_n_heads, d = ds.index_head_dim;
  if (d % 2 != 0 || (d & (d - 1)) != 0 || ds.qk_rope_head_dim > d) {
    throw_input_error("index_head_dim {} must be a power of two of at least qk_rope_head_dim {}",
                      d, ds.qk_rope_head_dim);
  }
  // Replicated on every rank (see the header): whole tensors.
  wq_b_ = weights.matrix(prefix + "wq_b.weight", hi * d, ds.q_lora_rank);
  wk_ = weights.matrix(prefix + "wk.weight", d, hidden_);
  k_norm_weight_ = weights.vector(prefix + "k_norm.weight", d);
  k_norm_bias_ = weights.vector(prefix + "k_norm.bias", d);
  weights_proj_ = f32_copy(weights.matrix(prefix + "weights_proj.weight", hi, hidden_),
                           weights_proj_data_);
}

void LightningIndexer::reserve(int64_t tokens) {
  if (tokens <= capacity_) return;
  capacity_ = tokens;
  q_.resize(tokens * ds_.index_n_heads * ds_.index_head_dim);
  k_.resize(tokens * ds_.index_head_dim);
  w_.resize(tokens * ds_.index_n_heads);
  key_slots_.resize(tokens * ds_.index_topk);
}

void LightningIndexer::write_keys(const float* x, const BatchMetadata& batch,
                                  const KVGroupMetadata& group, void* cache,
                                  const KVCacheView& kv, int64_t tokens) {
  reserve(tokens);
  const int64_t d = ds_.index_head_dim;
  ops::linear(x, tokens, wk_, nullptr, k_.data());
  ops::layer_norm(k_.data(), k_norm_weight_, k_norm_bias_, tokens, d, eps_, k_.data());
  // RoPE on the FIRST rope dims, half-split pairs (spec §0.3: the layout
  // DeepSeek fixed in Nov 2025), with MLA's frequency table; select()
  // rotates q the same way.
  ops::RopeParams p;
  p.num_heads = 1;
  p.head_dim = static_cast<int>(d);
  p.rot_dim = static_cast<int>(ds_.qk_rope_head_dim);
  p.layout = ops::RopeLayout::NeoX;
  ops::rope(k_.data(), tokens, batch.positions.data(), inv_freq_.data(), p);
  // The rotation leaves q.k unchanged in exact arithmetic; it spreads
  // outliers before a quantised cache rounds the keys, as DeepSeek does.
  hadamard_rotate(k_.data(), tokens, d);
  const ops::IndexerLayout layout{kv.block_size, static_cast<int>(d), kv.dtype};
  ops::write_indexer_k(k_.data(), group.slot_mapping.data(), tokens, layout, cache);
}

void LightningIndexer::select(const float* x, const float* c_q, const BatchMetadata& batch,
                              const KVGroupMetadata& group, const void* cache,
                              const KVCacheView& kv, int64_t tokens, int32_t* topk_positions) {
  reserve(tokens);
  const int64_t hi = ds_.index_n_heads, d = ds_.index_head_dim;
  ops::linear(c_q, tokens, wq_b_, nullptr, q_.data());
  ops::linear(x, tokens, weights_proj_, nullptr, w_.data());
  ops::RopeParams p;  // as write_keys rotates the keys
  p.num_heads = static_cast<int>(hi);
  p.head_dim = static_cast<int>(d);
  p.rot_dim = static_cast<int>(ds_.qk_rope_head_dim);
  p.layout = ops::RopeLayout::NeoX;
  ops::rope(q_.data(), tokens, batch.positions.data(), inv_freq_.data(), p);
  hadamard_rotate(q_.data(), tokens * hi, d);
  const float head_scale =
      static_cast<float>(1.0 / std::sqrt(static_cast<double>(hi) * static_cast<double>(d)));
  for (int64_t i = 0; i < tokens * hi; ++i) w_[i] *= head_scale;

  const ops::IndexerLayout layout{kv.block_size, static_cast<int>(d), kv.dtype};
  const ops::AttentionBatch ab = attention_batch(batch, group);
  // Positions, not slots: the latent cache is another group, with block
  // tables of its own. In position order, so that with index_topk >= the
  // context the sparse attention reads exactly the dense one's keys in its
  // order (the same bits).
  ops::indexer_topk(q_.data(), w_.data(), cache, layout, ab, static_cast<int>(hi),
                    static_cast<int>(ds_.index_topk), key_slots_.data(), topk_positions,
                    ops::IndexerOrder::Position);
}

}  // namespace pagoda
