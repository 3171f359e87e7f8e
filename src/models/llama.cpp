#include "models/llama.h"

#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "models/rope.h"
#include "models/weights.h"
#include "ops/ops.h"

namespace pagoda {

namespace {

struct LayerWeights {
  const float* input_norm = nullptr;
  ops::Matrix q, k, v, o;
  const float* q_bias = nullptr;
  const float* k_bias = nullptr;
  const float* v_bias = nullptr;
  const float* q_norm = nullptr;  // qk_norm variant only
  const float* k_norm = nullptr;
  const float* post_attention_norm = nullptr;
  // Read in place; their outputs fill the two halves of one buffer.
  ops::Matrix gate, up;
  ops::Matrix down;
  int64_t sliding_window = 0;
};

// Scratch activations, sized for the largest batch seen so far; reused by
// every step so the forward pass does not allocate per token.
struct Workspace {
  std::vector<float> residual, hidden, q, k, v, attn, proj, gate_up, act, selected;
  int64_t capacity = 0;

  void reserve(int64_t tokens, const ModelConfig& c) {
    if (tokens <= capacity) return;
    capacity = tokens;
    const int64_t q_width = c.num_attention_heads * c.head_dim;
    const int64_t kv_width = c.num_key_value_heads * c.head_dim;
    residual.resize(tokens * c.hidden_size);
    hidden.resize(tokens * c.hidden_size);
    q.resize(tokens * q_width);
    k.resize(tokens * kv_width);
    v.resize(tokens * kv_width);
    attn.resize(tokens * q_width);
    proj.resize(tokens * c.hidden_size);
    gate_up.resize(tokens * 2 * c.intermediate_size);
    act.resize(tokens * c.intermediate_size);
    selected.resize(tokens * c.hidden_size);
  }
};

class LlamaModel final : public CausalLM {
 public:
  LlamaModel(const ModelConfig& config, std::unique_ptr<Checkpoint> checkpoint,
             const LlamaVariant& variant)
      : config_(config), checkpoint_(std::move(checkpoint)), weights_(*checkpoint_) {
    load(variant);
    inv_freq_ =
        rope_inv_freq(config_.rope_scaling, config_.rope_theta, static_cast<int>(config_.head_dim));
  }

  const ModelConfig& config() const override { return config_; }

  KVCacheSpec kv_cache_spec() const override {
    KVCacheSpec spec;
    spec.num_layers = config_.num_hidden_layers;
    spec.num_kv_heads = config_.num_key_value_heads;
    spec.head_dim = config_.head_dim;
    for (const auto& layer : layers_) spec.layer_sliding_window.push_back(layer.sliding_window);
    return spec;
  }

  void forward(const BatchMetadata& batch, const KVCacheView& kv, float* logits) override;

  int64_t weight_bytes_per_step() const override {
    auto bytes = [](const ops::Matrix& m) {
      return m.rows * m.cols * static_cast<int64_t>(dtype_size(m.dtype));
    };
    int64_t total = bytes(lm_head_);
    for (const LayerWeights& w : layers_) {
      total += bytes(w.q) + bytes(w.k) + bytes(w.v) + bytes(w.o) + bytes(w.gate) + bytes(w.up) +
               bytes(w.down);
    }
    return total;
  }

 private:
  void load(const LlamaVariant& variant);
  void attention(const LayerWeights& w, const BatchMetadata& batch, const KVGroupMetadata& group,
                 float* k_cache, float* v_cache, const ops::KVLayout& layout, int64_t tokens);

  ModelConfig config_;
  std::unique_ptr<Checkpoint> checkpoint_;
  WeightStore weights_;
  ops::Matrix embed_tokens_, lm_head_;
  const float* final_norm_ = nullptr;
  std::vector<LayerWeights> layers_;
  std::vector<float> inv_freq_;
  Workspace ws_;
};

void LlamaModel::load(const LlamaVariant& variant) {
  const ModelConfig& c = config_;
  const int64_t h = c.hidden_size, hd = c.head_dim, inter = c.intermediate_size;
  const int64_t q_rows = c.num_attention_heads * hd, kv_rows = c.num_key_value_heads * hd;
  embed_tokens_ = weights_.matrix("model.embed_tokens.weight", c.vocab_size, h);
  if (c.tie_word_embeddings) {
    lm_head_ = embed_tokens_;
  } else {
    lm_head_ = weights_.matrix("lm_head.weight", c.vocab_size, h);
  }
  final_norm_ = weights_.vector("model.norm.weight", h);
  layers_.resize(c.num_hidden_layers);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    LayerWeights& w = layers_[i];
    w.input_norm = weights_.vector(p + "input_layernorm.weight", h);
    w.q = weights_.matrix(p + "self_attn.q_proj.weight", q_rows, h);
    w.k = weights_.matrix(p + "self_attn.k_proj.weight", kv_rows, h);
    w.v = weights_.matrix(p + "self_attn.v_proj.weight", kv_rows, h);
    w.o = weights_.matrix(p + "self_attn.o_proj.weight", h, q_rows);
    if (c.attention_bias) {
      w.q_bias = weights_.vector(p + "self_attn.q_proj.bias", q_rows);
      w.k_bias = weights_.vector(p + "self_attn.k_proj.bias", kv_rows);
      w.v_bias = weights_.vector(p + "self_attn.v_proj.bias", kv_rows);
    }
    if (variant.qk_norm) {
      w.q_norm = weights_.vector(p + "self_attn.q_norm.weight", hd);
      w.k_norm = weights_.vector(p + "self_attn.k_norm.weight", hd);
    }
    w.post_attention_norm = weights_.vector(p + "post_attention_layernorm.weight", h);
    w.gate = weights_.matrix(p + "mlp.gate_proj.weight", inter, h);
    w.up = weights_.matrix(p + "mlp.up_proj.weight", inter, h);
    w.down = weights_.matrix(p + "mlp.down_proj.weight", h, inter);
    if (!c.layer_sliding_window.empty()) w.sliding_window = c.layer_sliding_window[i];
  }
}

void LlamaModel::attention(const LayerWeights& w, const BatchMetadata& batch,
                           const KVGroupMetadata& group, float* k_cache, float* v_cache,
                           const ops::KVLayout& layout, int64_t tokens) {
  const ModelConfig& c = config_;
  const int hd = static_cast<int>(c.head_dim);
  const int q_heads = static_cast<int>(c.num_attention_heads);
  const int kv_heads = static_cast<int>(c.num_key_value_heads);
  ops::linear(ws_.hidden.data(), tokens, w.q, w.q_bias, ws_.q.data());
  ops::linear(ws_.hidden.data(), tokens, w.k, w.k_bias, ws_.k.data());
  ops::linear(ws_.hidden.data(), tokens, w.v, w.v_bias, ws_.v.data());
  if (w.q_norm) {
    const auto eps = static_cast<float>(c.rms_norm_eps);
    ops::rms_norm(ws_.q.data(), w.q_norm, tokens * q_heads, hd, eps, ws_.q.data());
    ops::rms_norm(ws_.k.data(), w.k_norm, tokens * kv_heads, hd, eps, ws_.k.data());
  }
  ops::rope(ws_.q.data(), tokens, q_heads, hd, batch.positions.data(), inv_freq_.data(), hd);
  ops::rope(ws_.k.data(), tokens, kv_heads, hd, batch.positions.data(), inv_freq_.data(), hd);
  ops::write_kv(ws_.k.data(), ws_.v.data(), group.slot_mapping.data(), tokens, layout, k_cache,
                v_cache);

  ops::AttentionBatch ab;
  ab.num_seqs = batch.num_seqs();
  ab.query_start_loc = batch.query_start_loc.data();
  ab.seq_lens = batch.seq_lens.data();
  ab.block_tables = group.block_tables.data();
  ab.max_blocks_per_seq = group.max_blocks_per_seq;
  ab.sliding_window = static_cast<int>(w.sliding_window);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  ops::paged_attention(ws_.q.data(), k_cache, v_cache, layout, ab, q_heads, scale, ws_.attn.data());
  ops::linear(ws_.attn.data(), tokens, w.o, nullptr, ws_.proj.data());
}

void LlamaModel::forward(const BatchMetadata& batch, const KVCacheView& kv, float* logits) {
  const ModelConfig& c = config_;
  const int64_t tokens = batch.num_tokens();
  const int64_t h = c.hidden_size;
  const auto eps = static_cast<float>(c.rms_norm_eps);
  PAGODA_CHECK(static_cast<int64_t>(kv.k.size()) == c.num_hidden_layers, "kv layers {}",
               kv.k.size());
  ws_.reserve(tokens, c);

  ops::embedding(batch.token_ids.data(), tokens, embed_tokens_, ws_.residual.data());
  for (size_t i = 0; i < layers_.size(); ++i) {
    const LayerWeights& w = layers_[i];
    if (i == 0) {
      ops::rms_norm(ws_.residual.data(), w.input_norm, tokens, h, eps, ws_.hidden.data());
    } else {  // residual += previous MLP output, then this layer's pre-norm
      ops::add_rms_norm(ws_.residual.data(), ws_.proj.data(), w.input_norm, tokens, h, eps,
                        ws_.hidden.data());
    }
    attention(w, batch, batch.kv_groups[kv.layer_group[i]], kv.k[i], kv.v[i], kv.layout, tokens);
    ops::add_rms_norm(ws_.residual.data(), ws_.proj.data(), w.post_attention_norm, tokens, h, eps,
                      ws_.hidden.data());
    const int64_t inter = c.intermediate_size;
    ops::linear(ws_.hidden.data(), tokens, w.gate, nullptr, ws_.gate_up.data(), 2 * inter);
    ops::linear(ws_.hidden.data(), tokens, w.up, nullptr, ws_.gate_up.data() + inter, 2 * inter);
    ops::silu_mul(ws_.gate_up.data(), tokens, c.intermediate_size, ws_.act.data());
    ops::linear(ws_.act.data(), tokens, w.down, nullptr, ws_.proj.data());
  }
  // Only the rows whose logits are wanted go through the final norm and the
  // (large) LM head.
  const int64_t rows = static_cast<int64_t>(batch.logits_indices.size());
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = batch.logits_indices[r];
    PAGODA_CHECK(t >= 0 && t < tokens, "logits index {}", t);
    for (int64_t j = 0; j < h; ++j) {
      ws_.selected[r * h + j] = ws_.residual[t * h + j] + ws_.proj[t * h + j];
    }
  }
  ops::rms_norm(ws_.selected.data(), final_norm_, rows, h, eps, ws_.selected.data());
  ops::linear(ws_.selected.data(), rows, lm_head_, nullptr, logits);
}

}  // namespace

std::unique_ptr<CausalLM> make_llama_family(const ModelConfig& config,
                                            std::unique_ptr<Checkpoint> checkpoint,
                                            const LlamaVariant& variant) {
  if (config.hidden_act != "silu") {
    throw_input_error("{}/config.json: hidden_act '{}' is not supported (only 'silu')",
                      checkpoint->dir(), config.hidden_act);
  }
  return std::make_unique<LlamaModel>(config, std::move(checkpoint), variant);
}

}  // namespace pagoda
