#include "models/llama.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "models/linear_weights.h"
#include "models/quantize.h"
#include "models/rope.h"
#include "models/vocab_parallel.h"
#include "models/weights.h"
#include "ops/ops.h"
#include "parallel/communicator.h"

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

// This rank's part of the model under tensor parallelism (nano-vLLM /
// vLLM scheme). q/k/v and gate/up are column-parallel (a rank owns whole
// heads and a slice of the intermediate features: row slices of the HF
// [out, in] weights), o_proj and down_proj are row-parallel (column slices)
// followed by one all-reduce each; embeddings and the LM head are split
// along the vocabulary (models/vocab_parallel.h). With tp > num_kv_heads each KV head is replicated
// on tp / num_kv_heads ranks. tp = 1 is the whole model.
struct Shard {
  int rank = 0, size = 1;
  int64_t q_heads = 0, q_head_begin = 0;
  int64_t kv_heads = 0, kv_head_begin = 0;
  int64_t intermediate = 0, intermediate_begin = 0;

  Shard(const ModelConfig& c, int rank_, int size_) : rank(rank_), size(size_) {
    const int64_t tp = size;
    auto refuse = [&](const std::string& why) {
      throw parallel::ParallelConfigError(
          fmt::format("tensor parallel size {} does not fit this model: {}", tp, why));
    };
    if (c.num_attention_heads % tp != 0) {
      refuse(
          fmt::format("num_attention_heads {} is not divisible by {}", c.num_attention_heads, tp));
    }
    if (c.num_key_value_heads % tp != 0 && tp % c.num_key_value_heads != 0) {
      refuse(fmt::format(
          "num_key_value_heads {} and {} do not divide one another (KV heads are split, or "
          "replicated when the tensor parallel size is a multiple of them)",
          c.num_key_value_heads, tp));
    }
    if (c.intermediate_size % tp != 0) {
      refuse(fmt::format("intermediate_size {} is not divisible by {}", c.intermediate_size, tp));
    }
    q_heads = c.num_attention_heads / tp;
    q_head_begin = rank * q_heads;
    if (c.num_key_value_heads >= tp) {
      kv_heads = c.num_key_value_heads / tp;
      kv_head_begin = rank * kv_heads;
    } else {  // replicated: ranks [k * tp/kv, (k+1) * tp/kv) share KV head k
      kv_heads = 1;
      kv_head_begin = rank / (tp / c.num_key_value_heads);
    }
    intermediate = c.intermediate_size / tp;
    intermediate_begin = rank * intermediate;
  }
};

// Tokens per pass of the MLP: its two intermediate buffers (3 x
// intermediate floats a token, 36 KiB for Qwen3-0.6B) are sized for this many
// rather than the whole step, which keeps a 2048-token prefill's activations
// ~55 MB smaller; 512 rows still reuse each weight panel ~85 times. Rows of
// the GEMM do not depend on the batch, so slicing changes no result.
constexpr int64_t kMlpSliceTokens = 512;

// Scratch activations, sized for the largest batch seen so far; reused by
// every step so the forward pass does not allocate per token.
struct Workspace {
  std::vector<float> residual, hidden, q, k, v, attn, proj, gate_up, act, selected;
  std::vector<float> cos_sin;  // the step's RoPE cosines and sines, for every layer
  int64_t capacity = 0;

  void reserve(int64_t tokens, const ModelConfig& c, const Shard& s) {
    if (tokens <= capacity) return;
    capacity = tokens;
    const int64_t q_width = s.q_heads * c.head_dim;
    const int64_t kv_width = s.kv_heads * c.head_dim;
    residual.resize(tokens * c.hidden_size);
    hidden.resize(tokens * c.hidden_size);
    q.resize(tokens * q_width);
    k.resize(tokens * kv_width);
    v.resize(tokens * kv_width);
    attn.resize(tokens * q_width);
    proj.resize(tokens * c.hidden_size);
    const int64_t mlp_tokens = std::min(tokens, kMlpSliceTokens);
    gate_up.resize(mlp_tokens * 2 * s.intermediate);
    act.resize(mlp_tokens * s.intermediate);
    selected.resize(tokens * c.hidden_size);
    cos_sin.resize(tokens * c.head_dim);
  }
};

class LlamaModel final : public CausalLM {
 public:
  LlamaModel(const ModelConfig& config, std::unique_ptr<Checkpoint> checkpoint,
             const LlamaVariant& variant, parallel::Communicator& comm,
             const WeightOptions& options)
      : config_(config),
        comm_(comm),
        shard_(config, comm.rank(), comm.size()),
        checkpoint_(std::move(checkpoint)),
        weights_(*checkpoint_),
        options_(options),
        vocab_(weights_, comm, config.vocab_size, config.hidden_size, "model.embed_tokens.weight",
               config.tie_word_embeddings ? "" : "lm_head.weight") {
    // YaRN also scales cos and sin (rope_attention_factor), which this
    // model's fused RoPE does not: refuse rather than compute wrong logits.
    if (config_.rope_scaling.is_yarn()) {
      throw_input_error("rope_scaling type '{}' is supported for DeepSeek models only, not {}",
                        config_.rope_scaling.type, config_.architecture);
    }
    load(variant);
    inv_freq_ =
        rope_inv_freq(config_.rope_scaling, config_.rope_theta, static_cast<int>(config_.head_dim));
  }

  const ModelConfig& config() const override { return config_; }

  std::vector<LayerKVCache> kv_cache_specs(DType kv_dtype) const override {
    return llama_kv_cache_specs(config_, shard_.kv_heads, kv_dtype);
  }

  DType weight_dtype() const override { return weight_dtype_; }
  void forward(const BatchMetadata& batch, const KVCacheView& kv, float* logits) override;
  size_t owned_weight_bytes() const override { return weights_.owned_bytes(); }
  bool repacked_weights() const override { return vocab_.head().packed; }

  int64_t weight_bytes_per_step() const override {
    auto bytes = [](const ops::Matrix& m) { return matrix_bytes(m); };
    int64_t total = bytes(vocab_.head());
    for (const LayerWeights& w : layers_) {
      total += bytes(w.q) + bytes(w.k) + bytes(w.v) + bytes(w.o) + bytes(w.gate) + bytes(w.up) +
               bytes(w.down);
    }
    return total;
  }

 private:
  void load(const LlamaVariant& variant);
  void qkv(const LayerWeights& w, const float* mlp_out, int64_t tokens);
  void attention(const LayerWeights& w, const BatchMetadata& batch, const KVGroupMetadata& group,
                 void* k_cache, void* v_cache, const ops::KVLayout& layout, int64_t tokens);

  ModelConfig config_;
  parallel::Communicator& comm_;
  Shard shard_;
  std::unique_ptr<Checkpoint> checkpoint_;
  WeightStore weights_;
  WeightOptions options_;
  DType weight_dtype_ = DType::F32;  // as stored in the checkpoint
  VocabParallelEmbedding vocab_;
  const float* final_norm_ = nullptr;
  std::vector<LayerWeights> layers_;
  std::vector<float> inv_freq_;
  Workspace ws_;
};

void LlamaModel::load(const LlamaVariant& variant) {
  const ModelConfig& c = config_;
  const Shard& s = shard_;
  const int64_t h = c.hidden_size, hd = c.head_dim, inter = c.intermediate_size;
  const int64_t q_rows = c.num_attention_heads * hd, kv_rows = c.num_key_value_heads * hd;
  // This rank's rows of q/k/v (whole heads) and of gate/up, and the matching
  // columns of o_proj/down_proj; with tp = 1 these are the whole tensors.
  const int64_t q0 = s.q_head_begin * hd, qn = s.q_heads * hd;
  const int64_t kv0 = s.kv_head_begin * hd, kvn = s.kv_heads * hd;
  const int64_t i0 = s.intermediate_begin, in = s.intermediate;
  weight_dtype_ = checkpoint_->get("model.embed_tokens.weight").dtype;
  final_norm_ = weights_.vector("model.norm.weight", h);
  layers_.resize(c.num_hidden_layers);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    LayerWeights& w = layers_[i];
    w.input_norm = weights_.vector(p + "input_layernorm.weight", h);
    w.q = weights_.row_slice(p + "self_attn.q_proj.weight", q_rows, h, q0, qn);
    w.k = weights_.row_slice(p + "self_attn.k_proj.weight", kv_rows, h, kv0, kvn);
    w.v = weights_.row_slice(p + "self_attn.v_proj.weight", kv_rows, h, kv0, kvn);
    w.o = weights_.col_slice(p + "self_attn.o_proj.weight", h, q_rows, q0, qn);
    if (c.attention_bias) {
      w.q_bias = weights_.vector_slice(p + "self_attn.q_proj.bias", q_rows, q0, qn);
      w.k_bias = weights_.vector_slice(p + "self_attn.k_proj.bias", kv_rows, kv0, kvn);
      w.v_bias = weights_.vector_slice(p + "self_attn.v_proj.bias", kv_rows, kv0, kvn);
    }
    if (variant.qk_norm) {
      w.q_norm = weights_.vector(p + "self_attn.q_norm.weight", hd);
      w.k_norm = weights_.vector(p + "self_attn.k_norm.weight", hd);
    }
    w.post_attention_norm = weights_.vector(p + "post_attention_layernorm.weight", h);
    w.gate = weights_.row_slice(p + "mlp.gate_proj.weight", inter, h, i0, in);
    w.up = weights_.row_slice(p + "mlp.up_proj.weight", inter, h, i0, in);
    w.down = weights_.col_slice(p + "mlp.down_proj.weight", h, inter, i0, in);
    if (!c.layer_sliding_window.empty()) w.sliding_window = c.layer_sliding_window[i];
    for (ops::Matrix* m : {&w.q, &w.k, &w.v, &w.o, &w.gate, &w.up, &w.down}) {
      *m = prepare_linear(weights_, *m, options_);  // this rank's shards, layer by layer
    }
  }
  vocab_.prepare(options_);
}

// The layer's pre-norm (after adding the previous layer's MLP output
// mlp_out to the residual stream, unless this is the first layer) and its
// q/k/v projections.
void LlamaModel::qkv(const LayerWeights& w, const float* mlp_out, int64_t tokens) {
  const int64_t h = config_.hidden_size;
  const auto eps = static_cast<float>(config_.rms_norm_eps);
  const ops::LinearOutput qkv[3] = {{&w.q, w.q_bias, ws_.q.data()},
                                    {&w.k, w.k_bias, ws_.k.data()},
                                    {&w.v, w.v_bias, ws_.v.data()}};
  if (mlp_out == nullptr) {
    ops::rms_norm(ws_.residual.data(), w.input_norm, tokens, h, eps, ws_.hidden.data());
    ops::linear_multi(ws_.hidden.data(), tokens, qkv, 3);
  } else {
    ops::add_rms_norm_linear(ws_.residual.data(), mlp_out, w.input_norm, tokens, eps,
                             ws_.hidden.data(), qkv, 3);
  }
}

// Attention from the layer's q/k/v on, through o_proj (into ws_.proj).
void LlamaModel::attention(const LayerWeights& w, const BatchMetadata& batch,
                           const KVGroupMetadata& group, void* k_cache, void* v_cache,
                           const ops::KVLayout& layout, int64_t tokens) {
  const ModelConfig& c = config_;
  const int hd = static_cast<int>(c.head_dim);
  const int q_heads = static_cast<int>(shard_.q_heads);
  ops::AttentionInputs in;
  in.q = ws_.q.data();
  in.k = ws_.k.data();
  in.v = ws_.v.data();
  in.num_tokens = tokens;
  in.num_q_heads = q_heads;
  in.q_norm = w.q_norm;
  in.k_norm = w.k_norm;
  in.eps = static_cast<float>(c.rms_norm_eps);
  in.positions = batch.positions.data();
  in.inv_freq = inv_freq_.data();
  in.rot_dim = hd;
  in.cos_sin = ws_.cos_sin.data();
  in.slot_mapping = group.slot_mapping.data();
  ops::AttentionBatch ab = attention_batch(batch, group);
  ab.sliding_window = static_cast<int>(w.sliding_window);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  ops::paged_attention(in, k_cache, v_cache, layout, ab, scale, ws_.attn.data());
  ops::linear(ws_.attn.data(), tokens, w.o, nullptr, ws_.proj.data());
  comm_.all_reduce_sum(ws_.proj.data(), tokens * c.hidden_size);  // row-parallel o_proj
}

void LlamaModel::forward(const BatchMetadata& batch, const KVCacheView& kv, float* logits) {
  const ModelConfig& c = config_;
  const int64_t tokens = batch.num_tokens();
  const int64_t h = c.hidden_size;
  const auto eps = static_cast<float>(c.rms_norm_eps);
  PAGODA_CHECK(static_cast<int64_t>(kv.layers.size()) == c.num_hidden_layers, "kv layers {}",
               kv.layers.size());
  const ops::KVLayout layout{kv.block_size, static_cast<int>(shard_.kv_heads),
                             static_cast<int>(c.head_dim), kv.dtype};
  ws_.reserve(tokens, c, shard_);
  ops::rope_cos_sin(batch.positions.data(), tokens, inv_freq_.data(),
                    static_cast<int>(c.head_dim / 2), ws_.cos_sin.data());

  vocab_.embed(batch.token_ids.data(), tokens, ws_.residual.data());
  for (size_t i = 0; i < layers_.size(); ++i) {
    const LayerWeights& w = layers_[i];
    qkv(w, i == 0 ? nullptr : ws_.proj.data(), tokens);
    const auto& caches = kv.layers[i];  // k, v as declared by kv_cache_specs
    attention(w, batch, batch.kv_groups[caches[0].group], caches[0].data, caches[1].data, layout,
              tokens);
    const int64_t inter = shard_.intermediate;
    const ops::LinearOutput gate_up[2] = {{&w.gate, nullptr, ws_.gate_up.data(), 2 * inter},
                                          {&w.up, nullptr, ws_.gate_up.data() + inter, 2 * inter}};
    // Slice by slice (rows are independent): residual += attention output,
    // the post-attention norm and gate/up; then SwiGLU and down, whose
    // output overwrites the slice's rows of proj only after they are read.
    for (int64_t t0 = 0; t0 < tokens; t0 += kMlpSliceTokens) {
      const int64_t n = std::min(kMlpSliceTokens, tokens - t0);
      ops::add_rms_norm_linear(ws_.residual.data() + t0 * h, ws_.proj.data() + t0 * h,
                               w.post_attention_norm, n, eps, ws_.hidden.data() + t0 * h, gate_up,
                               2);
      ops::silu_mul_linear(ws_.gate_up.data(), n, inter, ws_.act.data(),
                           {&w.down, nullptr, ws_.proj.data() + t0 * h});
    }
    comm_.all_reduce_sum(ws_.proj.data(), tokens * h);  // row-parallel down_proj
  }
  vocab_.final_logits(batch.logits_indices, tokens, ws_.residual.data(), ws_.proj.data(),
                      final_norm_, eps, ws_.selected.data(), logits);
}

}  // namespace

std::vector<LayerKVCache> llama_kv_cache_specs(const ModelConfig& config, int64_t kv_heads,
                                               DType kv_dtype) {
  std::vector<LayerKVCache> caches;
  for (int32_t l = 0; l < static_cast<int32_t>(config.num_hidden_layers); ++l) {
    KVCacheSpec spec;
    if (!config.layer_sliding_window.empty()) spec.sliding_window = config.layer_sliding_window[l];
    spec.entry_bytes = kv_heads * config.head_dim * static_cast<int64_t>(dtype_size(kv_dtype));
    spec.format =
        fmt::format("kv_heads {}x{} {}", kv_heads, config.head_dim, dtype_name(kv_dtype));
    caches.push_back({l, "k", spec});
    caches.push_back({l, "v", spec});
  }
  return caches;
}

std::unique_ptr<CausalLM> make_llama_family(const ModelConfig& config,
                                            std::unique_ptr<Checkpoint> checkpoint,
                                            const LlamaVariant& variant,
                                            parallel::Communicator& comm,
                                            const WeightOptions& options) {
  if (config.hidden_act != "silu") {
    throw_input_error("{}/config.json: hidden_act '{}' is not supported (only 'silu')",
                      checkpoint->dir(), config.hidden_act);
  }
  return std::make_unique<LlamaModel>(config, std::move(checkpoint), variant, comm, options);
}

}  // namespace pagoda
