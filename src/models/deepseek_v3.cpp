#include "models/deepseek_v3.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/parallel.h"
#include "models/deepseek_config.h"
#include "models/deepseek_indexer.h"
#include "models/linear_weights.h"
#include "models/output_rows.h"
#include "models/rope.h"
#include "models/vocab_parallel.h"
#include "models/weights.h"
#include "ops/moe.h"
#include "ops/ops.h"

namespace pagoda {

namespace {

// This rank's part under tensor parallelism (vLLM's scheme for DeepSeek
// without expert parallelism): attention heads are split (q_b, kv_b rows by
// head, o_proj columns), the latent projections (q_a, kv_a) and the latent
// cache are replicated on every rank, as vLLM's MLA does (the cache is the
// same on every rank; it is small, one 576-value entry per token); the dense
// MLP, every routed expert and the shared experts are split along their
// intermediate features (each rank runs every expert on a slice of it, so
// routing, load and work stay balanced whatever the router picks, and a
// token's output is the all-reduce of the ranks' partial sums, as for a
// dense MLP). Embeddings and the LM head are split along the vocabulary.
struct Shard {
  int rank = 0, size = 1;
  int64_t heads = 0, head_begin = 0;
  int64_t dense_inter = 0, dense_inter_begin = 0;
  int64_t expert_inter = 0, expert_inter_begin = 0;
  int64_t shared_inter = 0, shared_inter_begin = 0;

  Shard(const ModelConfig& c, const DeepseekConfig& d, int rank_, int size_)
      : rank(rank_), size(size_) {
    auto split = [&](int64_t total, const char* what, int64_t& count, int64_t& begin) {
      const parallel::EvenSplit s = parallel::split_evenly(total, what, rank, size);
      count = s.count;
      begin = s.begin;
    };
    split(c.num_attention_heads, "num_attention_heads", heads, head_begin);
    split(c.intermediate_size, "intermediate_size", dense_inter, dense_inter_begin);
    if (d.n_routed_experts > 0) {
      split(d.moe_intermediate_size, "moe_intermediate_size", expert_inter, expert_inter_begin);
      split(d.n_shared_experts * d.moe_intermediate_size, "n_shared_experts x "
            "moe_intermediate_size", shared_inter, shared_inter_begin);
    }
  }
};

// A SwiGLU MLP (dense layer or shared experts): gate and up read as one
// linear_multi, then down.
struct Mlp {
  ops::Matrix gate, up, down;
  int64_t inter = 0;  // this rank's intermediate features
};

struct Layer {
  const float* input_norm = nullptr;
  // Attention: q = q_b(rms_norm(q_a x)) or q_proj x; kv_a x = [c_kv ; k_pe].
  ops::Matrix q_a, q_b, q_proj, kv_a, o_proj;
  const float* q_a_norm = nullptr;
  const float* kv_a_norm = nullptr;
  // The absorbed form's per-head matrices from kv_b_proj (spec §3.1.2):
  // uk_t[h] = W_UK_h^T [kv_lora, nope] folds the key up-projection into the
  // query; uv[h] = W_UV_h [v_head, kv_lora] lifts the latent output. f32
  // copies made at load (the products are then exactly those of the
  // dequantised checkpoint weights, whatever it stores).
  std::vector<ops::Matrix> uk_t, uv;
  std::vector<float> uk_t_data, uv_data;
  const float* post_attention_norm = nullptr;
  // FFN: a dense MLP, or routed experts + shared experts.
  bool moe = false;
  Mlp mlp;  // the dense MLP, or the shared experts (inter 0: none)
  ops::Matrix router;  // [n_routed_experts, hidden], f32 (routing is decided in f32)
  std::vector<float> router_data;
  const float* correction_bias = nullptr;
  std::vector<ops::MoeExpert> experts;
  std::unique_ptr<LightningIndexer> indexer;  // V3.2 only
};

// The multi-token-prediction layer (spec §3.1.5; checkpoint names
// model.layers.{num_hidden_layers}.*): x = eh_proj [enorm(e) ; hnorm(h)],
// one decoder block, logits = head(shared_head.norm(x')). Its copies of
// the embedding and head (embed_tokens, shared_head.head) equal the main
// model's in published checkpoints, so the main ones are used.
struct MtpLayer {
  const float* enorm = nullptr;
  const float* hnorm = nullptr;
  const float* shared_head_norm = nullptr;
  ops::Matrix eh_proj;  // [hidden, 2 * hidden]: embedding half first
  Layer block;
};

struct Workspace {
  std::vector<float> residual, hidden, q_a, q, kv_a, q_lat, o_lat, head_in, o, proj;
  std::vector<float> gate_up, act, router_logits, topk_weights, moe_out, selected;
  std::vector<int32_t> topk_ids;
  std::vector<int32_t> index_positions, index_slots;  // V3.2: [tokens, index_topk]
  std::vector<float> mtp_in;                          // MTP: [tokens, 2 * hidden]
  ops::MoeScratch moe;
  int64_t capacity = 0;
};

class DeepseekV3Model final : public CausalLM {
 public:
  DeepseekV3Model(const ModelConfig& config, std::unique_ptr<Checkpoint> checkpoint,
                  parallel::Communicator& comm, const WeightOptions& options)
      : config_(config),
        ds_(load_deepseek_config(checkpoint->dir())),
        comm_(comm),
        shard_(config_, ds_, comm.rank(), comm.size()),
        checkpoint_(std::move(checkpoint)),
        weights_(*checkpoint_),
        options_(options),
        vocab_(weights_, comm, config.vocab_size, config.hidden_size, "model.embed_tokens.weight",
               config.tie_word_embeddings ? "" : "lm_head.weight") {
    weight_dtype_ = checkpoint_->get("model.embed_tokens.weight").dtype;
    init_rope();
    load();
  }

  const ModelConfig& config() const override { return config_; }
  DType weight_dtype() const override { return weight_dtype_; }
  size_t owned_weight_bytes() const override { return weights_.owned_bytes(); }
  bool repacked_weights() const override { return vocab_.head().packed; }

  // One latent entry per token and layer, [c_kv ; k_pe] (kv_lora_rank +
  // qk_rope_head_dim values, ops::MLALayout), the same on every rank.
  std::vector<LayerKVCache> kv_cache_specs(DType kv_dtype) const override {
    return deepseek_kv_cache_specs(config_, ds_, kv_dtype);
  }
  // The MTP block is one more MLA layer: a stack layer's caches.
  std::vector<LayerKVCache> mtp_kv_cache_specs(DType kv_dtype) const override {
    std::vector<LayerKVCache> caches;
    for (const LayerKVCache& c : deepseek_kv_cache_specs(config_, ds_, kv_dtype)) {
      if (c.layer == 0) caches.push_back(c);
    }
    return caches;
  }

  // A decode step of one token reads every dense matrix once, the shared
  // experts and num_experts_per_tok routed experts of each MoE layer.
  int64_t weight_bytes_per_step() const override {
    int64_t total = matrix_bytes(vocab_.head());
    for (const Layer& w : layers_) total += layer_bytes_per_token(w);
    return total;
  }
  // A step of num_tokens tokens: the same, but each MoE layer reads the
  // expected number of distinct routed experts those tokens pick.
  double expected_weight_bytes_per_step(int64_t num_tokens) const override {
    const double extra_experts =
        ops::expected_distinct_experts(static_cast<int>(ds_.n_routed_experts),
                                       static_cast<int>(ds_.num_experts_per_tok), num_tokens) -
        static_cast<double>(ds_.num_experts_per_tok);
    double total = static_cast<double>(weight_bytes_per_step());
    for (const Layer& w : layers_) {
      if (w.moe) total += extra_experts * static_cast<double>(routed_expert_bytes(w));
    }
    return total;
  }
  // One MTP pass of one token: eh_proj, its block and the shared head.
  int64_t mtp_weight_bytes_per_step() const override {
    if (!mtp_) return 0;
    return matrix_bytes(mtp_->eh_proj) + layer_bytes_per_token(mtp_->block) +
           matrix_bytes(vocab_.head());
  }

  // V3.2: attention reads the latents of the index_topk positions the
  // indexer picks; the indexer reads every key of its own cache.
  int64_t kv_bytes_read_per_token(int64_t context, DType kv_dtype) const override {
    int64_t bytes = 0;
    for (const LayerKVCache& c : kv_cache_specs(kv_dtype)) {
      const bool sparse = ds_.index_topk > 0 && c.name == "latent";
      bytes += (sparse ? std::min(context, ds_.index_topk) : context) * c.spec.entry_bytes;
    }
    return bytes;
  }

  // fp8: the "fp8_ds_mla" latent entries (scales per 128 latent values).
  bool supports_kv_cache_dtype(DType d) const override {
    return d == DType::F32 || d == DType::BF16 ||
           (d == DType::F8E4M3 && ds_.kv_lora_rank % ops::kMlaFp8Group == 0);
  }

  bool set_index_topk_observer(IndexTopkObserver observer) override {
    if (ds_.index_topk <= 0) return false;
    index_topk_observer_ = std::move(observer);
    return true;
  }

  // V3.2's sparse caches use 64-token pages, as the seed's (vLLM's) do.
  int32_t default_block_size() const override { return ds_.index_topk > 0 ? 64 : 16; }

  std::string load_notes() const override {
    if (mtp_bytes_ == 0) return "";
    return fmt::format("MTP layer ({:.1f} MiB) {}", mtp_bytes_ / 1048576.0,
                       mtp_ ? "drafts (speculative decoding)" : "not run");
  }

  bool has_mtp_layer() const override { return ds_.num_nextn_predict_layers > 0; }
  void enable_mtp() override;
  const float* mtp_hidden_states() const override {
    return mtp_ ? mtp_hidden_.data() : nullptr;
  }
  void mtp_forward(const BatchMetadata& batch, const float* hidden, const KVCacheView& kv,
                   float* logits, float* hidden_out) override;
  int64_t mtp_output_rows() const override { return mtp_output_rows_; }

  void forward(const BatchMetadata& batch, const KVCacheView& kv, float* logits) override;

 private:
  void init_rope();
  void load();
  // Decoder layer l (model.layers.{l}.*: a stack layer or the MTP block).
  void load_layer(int64_t l, Layer& w);
  void load_attention(const std::string& p, Layer& w);
  Mlp load_mlp(const std::string& p, int64_t inter, int64_t inter_begin, int64_t rank_inter);
  int64_t check_mtp_layer();
  // Weight bytes one token reads in layer w (dense matrices, router, the
  // shared experts and num_experts_per_tok routed ones).
  int64_t layer_bytes_per_token(const Layer& w) const {
    auto mlp_bytes = [](const Mlp& m) {
      return matrix_bytes(m.gate) + matrix_bytes(m.up) + matrix_bytes(m.down);
    };
    int64_t total = 0;
    for (const ops::Matrix* m : {&w.q_a, &w.q_b, &w.q_proj, &w.kv_a, &w.o_proj}) {
      if (m->data) total += matrix_bytes(*m);
    }
    for (const auto& m : w.uk_t) total += matrix_bytes(m);
    for (const auto& m : w.uv) total += matrix_bytes(m);
    if (w.mlp.inter > 0) total += mlp_bytes(w.mlp);
    if (w.moe) total += matrix_bytes(w.router) + ds_.num_experts_per_tok * routed_expert_bytes(w);
    return total;
  }
  // One routed expert's matrices in MoE layer w (all its experts alike).
  static int64_t routed_expert_bytes(const Layer& w) {
    const ops::MoeExpert& e = w.experts.front();
    return matrix_bytes(e.gate) + matrix_bytes(e.up) + matrix_bytes(e.down);
  }
  void reserve(int64_t tokens);
  // Layer `layer`'s attention over the normalised input ws_.hidden; its
  // caches are kv.layers[layer]: the latent entries, then (V3.2) the
  // indexer keys. The three parts below in order.
  void attention(const Layer& w, const BatchMetadata& batch, const KVCacheView& kv, size_t layer,
                 int64_t tokens);
  // The projections of ws_.hidden: q (ws_.q, through the q LoRA when the
  // model has one, leaving c_q in ws_.q_a) and / or kv_a = [c_kv ; k_pe]
  // (ws_.kv_a), in one pass over the rows when both.
  void project(const Layer& w, int64_t tokens, bool q, bool kv_a);
  // Writes the rows' cache entries from ws_.kv_a: the latents (c_kv
  // normalised, k_pe rotated) and (V3.2) the indexer keys of ws_.hidden.
  void write_caches(const Layer& w, const BatchMetadata& batch, const KVCacheView& kv,
                    size_t layer, int64_t tokens);
  // The attention of the rows' queries over the caches (their own entries
  // written) into ws_.proj.
  void attend(const Layer& w, const BatchMetadata& batch, const KVCacheView& kv, size_t layer,
              int64_t tokens);
  // The latent-cache slots of the indexer's picks (positions in each
  // token's own sequence), through the latent group's block tables.
  void positions_to_slots(const BatchMetadata& batch, const KVGroupMetadata& group,
                          int32_t block_size);
  void run_mlp(const Mlp& m, const float* x, int64_t tokens, float* out);
  void ffn(const Layer& w, int64_t tokens);

  ModelConfig config_;
  DeepseekConfig ds_;
  parallel::Communicator& comm_;
  Shard shard_;
  std::unique_ptr<Checkpoint> checkpoint_;
  WeightStore weights_;
  WeightOptions options_;
  VocabParallelEmbedding vocab_;
  DType weight_dtype_ = DType::F32;
  const float* final_norm_ = nullptr;
  std::vector<Layer> layers_;
  std::vector<float> inv_freq_;
  // YaRN scales rotated values by mscale(mscale) / mscale(mscale_all_dim)
  // (1 for DeepSeek V3's config) and the softmax by mscale(mscale_all_dim)^2.
  float rope_scale_ = 1.0f;
  float softmax_scale_ = 1.0f;
  ops::MoeRouting routing_;
  int64_t mtp_bytes_ = 0;
  std::unique_ptr<MtpLayer> mtp_;  // enable_mtp
  std::vector<float> mtp_hidden_;  // [tokens of the last forward, hidden]
  BatchMetadata mtp_outputs_;      // an MTP pass's output rows (output_rows_batch)
  int64_t mtp_output_rows_ = 0;
  Workspace ws_;
  IndexTopkObserver index_topk_observer_;  // set_index_topk_observer (tests)
};

void DeepseekV3Model::init_rope() {
  const RopeScaling& rs = config_.rope_scaling;
  inv_freq_ = rope_inv_freq(rs, config_.rope_theta, static_cast<int>(ds_.qk_rope_head_dim));
  softmax_scale_ = static_cast<float>(yarn_softmax_scale_factor(rs) /
                                      std::sqrt(static_cast<double>(ds_.q_head_dim())));
  rope_scale_ = static_cast<float>(rope_attention_factor(rs));
}

void DeepseekV3Model::load() {
  const ModelConfig& c = config_;
  const int64_t h = c.hidden_size;
  final_norm_ = weights_.vector("model.norm.weight", h);
  if (ds_.n_routed_experts > 0) {
    routing_.num_experts = static_cast<int>(ds_.n_routed_experts);
    routing_.top_k = static_cast<int>(ds_.num_experts_per_tok);
    routing_.n_group = static_cast<int>(ds_.n_group);
    routing_.topk_group = static_cast<int>(ds_.topk_group);
    routing_.scoring =
        ds_.scoring_func == "sigmoid" ? ops::MoeScoring::Sigmoid : ops::MoeScoring::Softmax;
    // noaux_tc scores a group by its two best (bias-corrected) experts; the
    // V2 methods by its best one ("greedy" has one group, so either).
    routing_.group_score =
        ds_.topk_method == "noaux_tc" ? ops::MoeGroupScore::Top2Sum : ops::MoeGroupScore::Max;
    routing_.norm_topk_prob = ds_.norm_topk_prob;
    routing_.routed_scaling_factor = static_cast<float>(ds_.routed_scaling_factor);
  }
  layers_.resize(c.num_hidden_layers);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) load_layer(l, layers_[l]);
  mtp_bytes_ = check_mtp_layer();
  vocab_.prepare(options_);
}

void DeepseekV3Model::load_layer(int64_t l, Layer& w) {
  const ModelConfig& c = config_;
  const int64_t h = c.hidden_size;
  const std::string p = "model.layers." + std::to_string(l) + ".";
  w.input_norm = weights_.vector(p + "input_layernorm.weight", h);
  load_attention(p, w);
  if (ds_.index_topk > 0) {
    w.indexer = std::make_unique<LightningIndexer>(weights_, p + "self_attn.indexer.", c, ds_,
                                                   inv_freq_);
  }
  w.post_attention_norm = weights_.vector(p + "post_attention_layernorm.weight", h);
  w.moe = ds_.is_moe_layer(l);
  if (!w.moe) {
    w.mlp = load_mlp(p + "mlp.", c.intermediate_size, shard_.dense_inter_begin,
                     shard_.dense_inter);
    return;
  }
  // The router decides in f32 (HF casts both operands): an f32 copy keeps
  // a bf16 kernel's rounding of the activations from flipping a choice.
  w.router = f32_copy(weights_.matrix(p + "mlp.gate.weight", ds_.n_routed_experts, h),
                      w.router_data);
  if (ds_.topk_method == "noaux_tc") {
    w.correction_bias =
        weights_.vector(p + "mlp.gate.e_score_correction_bias", ds_.n_routed_experts);
  }
  w.experts.resize(ds_.n_routed_experts);
  for (int64_t e = 0; e < ds_.n_routed_experts; ++e) {
    const Mlp m = load_mlp(p + "mlp.experts." + std::to_string(e) + ".",
                           ds_.moe_intermediate_size, shard_.expert_inter_begin,
                           shard_.expert_inter);
    w.experts[e] = {m.gate, m.up, m.down};
  }
  if (ds_.n_shared_experts > 0) {
    w.mlp = load_mlp(p + "mlp.shared_experts.", ds_.n_shared_experts * ds_.moe_intermediate_size,
                     shard_.shared_inter_begin, shard_.shared_inter);
  }
}

void DeepseekV3Model::load_attention(const std::string& p, Layer& w) {
  const int64_t h = config_.hidden_size, heads = config_.num_attention_heads;
  const int64_t nope = ds_.qk_nope_head_dim, rope = ds_.qk_rope_head_dim;
  const int64_t qh = ds_.q_head_dim(), lora = ds_.kv_lora_rank, v = ds_.v_head_dim;
  const int64_t hb = shard_.head_begin, hn = shard_.heads;
  const std::string a = p + "self_attn.";
  auto prep = [&](const ops::Matrix& m) { return prepare_linear(weights_, m, options_); };
  if (ds_.q_lora_rank > 0) {
    w.q_a = prep(weights_.matrix(a + "q_a_proj.weight", ds_.q_lora_rank, h));
    w.q_a_norm = weights_.vector(a + "q_a_layernorm.weight", ds_.q_lora_rank);
    w.q_b = prep(weights_.row_slice(a + "q_b_proj.weight", heads * qh, ds_.q_lora_rank, hb * qh,
                                    hn * qh));
  } else {
    w.q_proj = prep(weights_.row_slice(a + "q_proj.weight", heads * qh, h, hb * qh, hn * qh));
  }
  w.kv_a = prep(weights_.matrix(a + "kv_a_proj_with_mqa.weight", lora + rope, h));
  w.kv_a_norm = weights_.vector(a + "kv_a_layernorm.weight", lora);
  w.o_proj = prep(weights_.col_slice(a + "o_proj.weight", h, heads * v, hb * v, hn * v));

  // kv_b_proj [heads * (nope + v), kv_lora]: per head, nope rows of W_UK
  // then v rows of W_UV.
  const ops::Matrix kv_b =
      weights_.row_slice(a + "kv_b_proj.weight", heads * (nope + v), lora, hb * (nope + v),
                         hn * (nope + v));
  w.uk_t_data.resize(hn * lora * nope);
  w.uv_data.resize(hn * v * lora);
  std::vector<float> row(lora);
  for (int64_t hh = 0; hh < hn; ++hh) {
    float* uk_t = w.uk_t_data.data() + hh * lora * nope;
    for (int64_t i = 0; i < nope; ++i) {  // row i of W_UK_h is column i of its transpose
      matrix_row_f32(kv_b, hh * (nope + v) + i, row.data());
      for (int64_t j = 0; j < lora; ++j) uk_t[j * nope + i] = row[j];
    }
    for (int64_t i = 0; i < v; ++i) {
      matrix_row_f32(kv_b, hh * (nope + v) + nope + i, w.uv_data.data() + (hh * v + i) * lora);
    }
    w.uk_t.push_back({uk_t, DType::F32, lora, nope});
    w.uv.push_back({w.uv_data.data() + hh * v * lora, DType::F32, v, lora});
  }
}

Mlp DeepseekV3Model::load_mlp(const std::string& p, int64_t inter, int64_t inter_begin,
                              int64_t rank_inter) {
  const int64_t h = config_.hidden_size;
  auto prep = [&](const ops::Matrix& m) { return prepare_linear(weights_, m, options_); };
  Mlp m;
  m.inter = rank_inter;
  m.gate = prep(weights_.row_slice(p + "gate_proj.weight", inter, h, inter_begin, rank_inter));
  m.up = prep(weights_.row_slice(p + "up_proj.weight", inter, h, inter_begin, rank_inter));
  m.down = prep(weights_.col_slice(p + "down_proj.weight", h, inter, inter_begin, rank_inter));
  return m;
}

// The multi-token-prediction layers (num_nextn_predict_layers) follow the
// stack as model.layers.{N}...: checked (names, shapes, dtypes, scales) so
// a checkpoint missing them is refused like any other, and their bytes
// reported; enable_mtp loads the first for the `mtp` proposer. Read in
// place, so they cost no memory until used.
int64_t DeepseekV3Model::check_mtp_layer() {
  int64_t bytes = 0;
  const int64_t h = config_.hidden_size;
  for (int64_t i = 0; i < ds_.num_nextn_predict_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(config_.num_hidden_layers + i) + ".";
    for (const char* n : {"enorm.weight", "hnorm.weight", "shared_head.norm.weight"}) {
      checkpoint_->get(p + n, {h});
    }
    weights_.matrix(p + "eh_proj.weight", h, 2 * h);
    for (const std::string& name : checkpoint_->names()) {
      if (name.rfind(p, 0) == 0) bytes += static_cast<int64_t>(checkpoint_->get(name).nbytes);
    }
  }
  return bytes;
}

void DeepseekV3Model::enable_mtp() {
  if (!has_mtp_layer()) {
    throw_input_error("{}: the checkpoint has no MTP layer (num_nextn_predict_layers is 0)",
                      checkpoint_->dir());
  }
  if (mtp_) return;
  const int64_t h = config_.hidden_size, l = config_.num_hidden_layers;
  const std::string p = "model.layers." + std::to_string(l) + ".";
  auto mtp = std::make_unique<MtpLayer>();
  mtp->enorm = weights_.vector(p + "enorm.weight", h);
  mtp->hnorm = weights_.vector(p + "hnorm.weight", h);
  mtp->shared_head_norm = weights_.vector(p + "shared_head.norm.weight", h);
  mtp->eh_proj = prepare_linear(weights_, weights_.matrix(p + "eh_proj.weight", h, 2 * h), options_);
  load_layer(l, mtp->block);
  mtp_ = std::move(mtp);
  ws_.capacity = 0;  // reserve() sizes the MTP input buffer too
}

void DeepseekV3Model::reserve(int64_t tokens) {
  Workspace& ws = ws_;
  if (tokens <= ws.capacity) return;
  ws.capacity = tokens;
  const int64_t h = config_.hidden_size, hn = shard_.heads;
  const int64_t lora = ds_.kv_lora_rank, rope = ds_.qk_rope_head_dim, v = ds_.v_head_dim;
  ws.residual.resize(tokens * h);
  ws.hidden.resize(tokens * h);
  ws.q_a.resize(tokens * std::max<int64_t>(1, ds_.q_lora_rank));
  ws.q.resize(tokens * hn * ds_.q_head_dim());
  ws.kv_a.resize(tokens * (lora + rope));
  ws.q_lat.resize(tokens * hn * (lora + rope));
  ws.o_lat.resize(tokens * hn * lora);
  ws.head_in.resize(tokens * ds_.qk_nope_head_dim);
  ws.o.resize(tokens * hn * v);
  ws.proj.resize(tokens * h);
  const int64_t inter = std::max({shard_.dense_inter, shard_.shared_inter, int64_t{1}});
  ws.gate_up.resize(tokens * 2 * inter);
  ws.act.resize(tokens * inter);
  ws.router_logits.resize(tokens * std::max<int64_t>(1, ds_.n_routed_experts));
  ws.topk_ids.resize(tokens * std::max<int64_t>(1, ds_.num_experts_per_tok));
  ws.topk_weights.resize(ws.topk_ids.size());
  ws.index_positions.resize(tokens * std::max<int64_t>(1, ds_.index_topk));
  ws.index_slots.resize(ws.index_positions.size());
  ws.moe_out.resize(tokens * h);
  ws.selected.resize(tokens * h);
  if (mtp_) ws.mtp_in.resize(tokens * 2 * h);
}

void DeepseekV3Model::positions_to_slots(const BatchMetadata& batch, const KVGroupMetadata& group,
                                         int32_t bs) {
  const int64_t k = ds_.index_topk;
  for (int32_t s = 0; s < batch.num_seqs(); ++s) {
    const int32_t* table = attention_batch(batch, group).block_table(s);
    for (int32_t t = batch.query_start_loc[s]; t < batch.query_start_loc[s + 1]; ++t) {
      for (int64_t j = 0; j < k; ++j) {
        const int32_t pos = ws_.index_positions[t * k + j];
        ws_.index_slots[t * k + j] = pos < 0 ? -1 : static_cast<int32_t>(table[pos / bs] * bs + pos % bs);
      }
    }
  }
}

void DeepseekV3Model::attention(const Layer& w, const BatchMetadata& batch,
                                const KVCacheView& kv, size_t layer, int64_t tokens) {
  project(w, tokens, /*q=*/true, /*kv_a=*/true);
  write_caches(w, batch, kv, layer, tokens);
  attend(w, batch, kv, layer, tokens);
}

void DeepseekV3Model::project(const Layer& w, int64_t tokens, bool q, bool kv_a) {
  Workspace& ws = ws_;
  // q through the q LoRA when the model has one; kv_a is shared by all heads.
  const ops::Matrix* q_first = ds_.q_lora_rank > 0 ? &w.q_a : &w.q_proj;
  float* q_out = ds_.q_lora_rank > 0 ? ws.q_a.data() : ws.q.data();
  ops::LinearOutput outs[2];
  int n = 0;
  if (q) outs[n++] = {q_first, nullptr, q_out};
  if (kv_a) outs[n++] = {&w.kv_a, nullptr, ws.kv_a.data()};
  ops::linear_multi(ws.hidden.data(), tokens, outs, n);
  if (q && ds_.q_lora_rank > 0) {
    const auto eps = static_cast<float>(config_.rms_norm_eps);
    ops::rms_norm(ws.q_a.data(), w.q_a_norm, tokens, ds_.q_lora_rank, eps, ws.q_a.data());
    ops::linear(ws.q_a.data(), tokens, w.q_b, nullptr, ws.q.data());
  }
}

void DeepseekV3Model::write_caches(const Layer& w, const BatchMetadata& batch,
                                   const KVCacheView& kv, size_t layer, int64_t tokens) {
  const KVCacheView::Cache& latent = kv.layers[layer][0];
  const KVGroupMetadata& group = batch.kv_groups[latent.group];
  Workspace& ws = ws_;
  const auto eps = static_cast<float>(config_.rms_norm_eps);
  const int64_t rope = ds_.qk_rope_head_dim, lora = ds_.kv_lora_rank, entry = lora + rope;
  for (int64_t t = 0; t < tokens; ++t) {  // c_kv = RMSNorm(kv_a[:lora]), in place
    float* c_kv = ws.kv_a.data() + t * entry;
    ops::rms_norm(c_kv, w.kv_a_norm, 1, lora, eps, c_kv);
  }
  // RoPE, interleaved pairs, on k_pe (attend() rotates q's last rope dims
  // the same way).
  ops::RopeParams kp;
  kp.num_heads = 1;
  kp.head_dim = static_cast<int>(entry);
  kp.offset = static_cast<int>(lora);
  kp.rot_dim = static_cast<int>(rope);
  kp.layout = ops::RopeLayout::Interleaved;
  ops::rope(ws.kv_a.data(), tokens, batch.positions.data(), inv_freq_.data(), kp);
  if (rope_scale_ != 1.0f) {
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t i = 0; i < rope; ++i) ws.kv_a[t * entry + lora + i] *= rope_scale_;
    }
  }
  const ops::MLALayout layout{kv.block_size, static_cast<int>(lora), static_cast<int>(rope),
                              kv.dtype};
  ops::write_mla_kv(ws.kv_a.data(), ws.kv_a.data() + lora, group.slot_mapping.data(), tokens,
                    layout, latent.data, entry, entry);
  if (w.indexer) {
    const KVCacheView::Cache& keys = kv.layers[layer][1];
    w.indexer->write_keys(ws.hidden.data(), batch, batch.kv_groups[keys.group], keys.data, kv,
                          tokens);
  }
}

void DeepseekV3Model::attend(const Layer& w, const BatchMetadata& batch, const KVCacheView& kv,
                             size_t layer, int64_t tokens) {
  const KVCacheView::Cache& latent = kv.layers[layer][0];
  const KVGroupMetadata& group = batch.kv_groups[latent.group];
  const void* cache = latent.data;
  Workspace& ws = ws_;
  const int64_t hn = shard_.heads, nope = ds_.qk_nope_head_dim, rope = ds_.qk_rope_head_dim;
  const int64_t qh = ds_.q_head_dim(), lora = ds_.kv_lora_rank, v = ds_.v_head_dim;
  const int64_t entry = lora + rope;
  // RoPE, interleaved pairs, on the last rope dims of each q head.
  ops::RopeParams qp;
  qp.num_heads = static_cast<int>(hn);
  qp.head_dim = static_cast<int>(qh);
  qp.offset = static_cast<int>(nope);
  qp.rot_dim = static_cast<int>(rope);
  qp.layout = ops::RopeLayout::Interleaved;
  ops::rope(ws.q.data(), tokens, batch.positions.data(), inv_freq_.data(), qp);
  if (rope_scale_ != 1.0f) {
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t hh = 0; hh < hn; ++hh) {
        for (int64_t i = 0; i < rope; ++i) ws.q[(t * hn + hh) * qh + nope + i] *= rope_scale_;
      }
    }
  }
  const ops::MLALayout layout{kv.block_size, static_cast<int>(lora), static_cast<int>(rope),
                              kv.dtype};

  // Absorbed form: q_lat[t, h] = [W_UK_h^T q_nope ; q_pe], attention in the
  // latent space, then o_h = W_UV_h o_lat.
  for (int64_t hh = 0; hh < hn; ++hh) {
    for (int64_t t = 0; t < tokens; ++t) {
      const float* q = ws.q.data() + (t * hn + hh) * qh;
      std::memcpy(ws.head_in.data() + t * nope, q, nope * sizeof(float));
      std::memcpy(ws.q_lat.data() + (t * hn + hh) * entry + lora, q + nope, rope * sizeof(float));
    }
    ops::linear(ws.head_in.data(), tokens, w.uk_t[hh], nullptr, ws.q_lat.data() + hh * entry,
                hn * entry);
  }
  const ops::AttentionBatch ab = attention_batch(batch, group);
  // The latent outputs head-major [heads, tokens, kv_lora]: each head's
  // rows are then one matrix for its W_UV product.
  ops::MlaStrides head_major;
  head_major.out_token = lora;
  head_major.out_head = tokens * lora;
  if (w.indexer) {  // V3.2: attend to the index_topk tokens the indexer picks
    const KVCacheView::Cache& keys = kv.layers[layer][1];
    w.indexer->select(ws.hidden.data(), ws.q_a.data(), batch, batch.kv_groups[keys.group],
                      keys.data, kv, tokens, ws.index_positions.data());
    if (index_topk_observer_) {
      index_topk_observer_(static_cast<int32_t>(layer), batch, ws.index_positions.data(),
                           ds_.index_topk);
    }
    positions_to_slots(batch, group, kv.block_size);
    ops::mla_sparse_attention(ws.q_lat.data(), cache, layout, ab, ws.index_slots.data(),
                              static_cast<int>(ds_.index_topk), static_cast<int>(hn),
                              softmax_scale_, ws.o_lat.data(), head_major);
  } else {
    ops::mla_paged_attention(ws.q_lat.data(), cache, layout, ab, static_cast<int>(hn),
                             softmax_scale_, ws.o_lat.data(), head_major);
  }
  for (int64_t hh = 0; hh < hn; ++hh) {
    ops::linear(ws.o_lat.data() + hh * tokens * lora, tokens, w.uv[hh], nullptr,
                ws.o.data() + hh * v, hn * v);
  }
  ops::linear(ws.o.data(), tokens, w.o_proj, nullptr, ws.proj.data());
  comm_.all_reduce_sum(ws.proj.data(), tokens * config_.hidden_size);  // row-parallel o_proj
}

void DeepseekV3Model::run_mlp(const Mlp& m, const float* x, int64_t tokens, float* out) {
  const ops::LinearOutput gate_up[2] = {{&m.gate, nullptr, ws_.gate_up.data(), 2 * m.inter},
                                        {&m.up, nullptr, ws_.gate_up.data() + m.inter, 2 * m.inter}};
  ops::linear_multi(x, tokens, gate_up, 2);
  ops::silu_mul(ws_.gate_up.data(), tokens, m.inter, ws_.act.data());
  ops::linear(ws_.act.data(), tokens, m.down, nullptr, out);
}

void DeepseekV3Model::ffn(const Layer& w, int64_t tokens) {
  Workspace& ws = ws_;
  const int64_t h = config_.hidden_size;
  if (!w.moe) {
    run_mlp(w.mlp, ws.hidden.data(), tokens, ws.proj.data());
  } else {
    ops::linear(ws.hidden.data(), tokens, w.router, nullptr, ws.router_logits.data());
    ops::MoeRouting routing = routing_;
    routing.correction_bias = w.correction_bias;
    ops::moe_route(ws.router_logits.data(), tokens, routing, ws.topk_ids.data(),
                   ws.topk_weights.data());
    ops::moe_experts_forward(ws.hidden.data(), tokens, ws.topk_ids.data(), ws.topk_weights.data(),
                             routing.top_k, w.experts.data(), routing.num_experts, ws.moe,
                             ws.moe_out.data());
    if (w.mlp.inter > 0) {
      run_mlp(w.mlp, ws.hidden.data(), tokens, ws.proj.data());
      for (int64_t i = 0; i < tokens * h; ++i) ws.proj[i] += ws.moe_out[i];
    } else {
      std::memcpy(ws.proj.data(), ws.moe_out.data(), tokens * h * sizeof(float));
    }
  }
  comm_.all_reduce_sum(ws.proj.data(), tokens * h);  // row-parallel down projections
}

void DeepseekV3Model::forward(const BatchMetadata& batch, const KVCacheView& kv, float* logits) {
  const int64_t tokens = batch.num_tokens(), h = config_.hidden_size;
  const auto eps = static_cast<float>(config_.rms_norm_eps);
  PAGODA_CHECK(kv.layers.size() == layers_.size(), "kv layers {}", kv.layers.size());
  reserve(tokens);
  vocab_.embed(batch.token_ids.data(), tokens, ws_.residual.data());
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& w = layers_[i];
    if (i == 0) {
      ops::rms_norm(ws_.residual.data(), w.input_norm, tokens, h, eps, ws_.hidden.data());
    } else {  // residual += previous FFN output, then this layer's pre-norm
      ops::add_rms_norm(ws_.residual.data(), ws_.proj.data(), w.input_norm, tokens, h, eps,
                        ws_.hidden.data());
    }
    attention(w, batch, kv, i, tokens);
    ops::add_rms_norm(ws_.residual.data(), ws_.proj.data(), w.post_attention_norm, tokens, h, eps,
                      ws_.hidden.data());
    ffn(w, tokens);
  }
  vocab_.final_logits(batch.logits_indices, tokens, ws_.residual.data(), ws_.proj.data(),
                      final_norm_, eps, ws_.selected.data(), logits);
  if (mtp_) {  // every token's final hidden state, after the final norm (spec §3.1.5)
    mtp_hidden_.resize(tokens * h);
    for (int64_t i = 0; i < tokens * h; ++i) mtp_hidden_[i] = ws_.residual[i] + ws_.proj[i];
    ops::rms_norm(mtp_hidden_.data(), final_norm_, tokens, h, eps, mtp_hidden_.data());
  }
}

void DeepseekV3Model::mtp_forward(const BatchMetadata& batch, const float* hidden,
                                  const KVCacheView& kv, float* logits, float* hidden_out) {
  PAGODA_CHECK(mtp_, "mtp_forward before enable_mtp");
  PAGODA_CHECK(comm_.size() == 1, "the MTP layer runs on a single rank");
  const int64_t tokens = batch.num_tokens(), h = config_.hidden_size;
  const auto eps = static_cast<float>(config_.rms_norm_eps);
  PAGODA_CHECK(kv.layers.size() == layers_.size() + 1, "kv layers {} (the MTP layer's last)",
               kv.layers.size());
  reserve(tokens);
  const MtpLayer& m = *mtp_;
  const size_t layer = layers_.size();
  // [enorm(e) ; hnorm(h)], e the embedding of token t + 1, zeroed at
  // position 0 as vLLM does (the pair (h_0, tok_1) then carries no token).
  vocab_.embed(batch.token_ids.data(), tokens, ws_.residual.data());
  for (int64_t t = 0; t < tokens; ++t) {
    float* in = ws_.mtp_in.data() + t * 2 * h;
    if (batch.positions[t] == 0) {
      std::fill(in, in + h, 0.0f);
    } else {
      ops::rms_norm(ws_.residual.data() + t * h, m.enorm, 1, h, eps, in);
    }
    ops::rms_norm(hidden + t * h, m.hnorm, 1, h, eps, in + h);
  }
  ops::linear(ws_.mtp_in.data(), tokens, m.eh_proj, nullptr, ws_.residual.data());
  const Layer& w = m.block;
  ops::rms_norm(ws_.residual.data(), w.input_norm, tokens, h, eps, ws_.hidden.data());
  // Every row's cache entries (later positions read them); the rest of the
  // block and the head only for the rows whose outputs are wanted
  // (models/output_rows.h).
  project(w, tokens, /*q=*/false, /*kv_a=*/true);
  write_caches(w, batch, kv, layer, tokens);
  output_rows_batch(batch, mtp_outputs_);
  const BatchMetadata& out = mtp_outputs_;
  const int64_t rows = out.num_tokens();
  mtp_output_rows_ += rows;
  if (rows == 0) return;
  gather_rows(ws_.residual.data(), h, batch.logits_indices);
  gather_rows(ws_.hidden.data(), h, batch.logits_indices);
  project(w, rows, /*q=*/true, /*kv_a=*/false);
  attend(w, out, kv, layer, rows);
  ops::add_rms_norm(ws_.residual.data(), ws_.proj.data(), w.post_attention_norm, rows, h, eps,
                    ws_.hidden.data());
  ffn(w, rows);
  vocab_.final_logits(out.logits_indices, rows, ws_.residual.data(), ws_.proj.data(),
                      m.shared_head_norm, eps, ws_.selected.data(), logits);
  for (int64_t i = 0; i < rows * h; ++i) hidden_out[i] = ws_.residual[i] + ws_.proj[i];  // x'
}

}  // namespace

std::vector<LayerKVCache> deepseek_kv_cache_specs(const ModelConfig& config,
                                                  const DeepseekConfig& ds, DType kv_dtype) {
  KVCacheSpec latent;
  const int64_t lora = ds.kv_lora_rank, rope = ds.qk_rope_head_dim;
  if (kv_dtype == DType::F8E4M3) {
    latent.entry_bytes = lora + (lora + 127) / 128 * 4 + rope * 2;
    latent.format = fmt::format("fp8_ds_mla {}+{}", lora, rope);
  } else {
    latent.entry_bytes = (lora + rope) * static_cast<int64_t>(dtype_size(kv_dtype));
    latent.format = fmt::format("mla {}+{} {}", lora, rope, dtype_name(kv_dtype));
  }
  std::vector<LayerKVCache> caches;
  for (int32_t l = 0; l < static_cast<int32_t>(config.num_hidden_layers); ++l) {
    caches.push_back({l, "latent", latent});
    if (ds.index_topk > 0) {
      caches.push_back({l, "indexer_k", LightningIndexer::cache_spec(ds, kv_dtype)});
    }
  }
  return caches;
}

std::unique_ptr<CausalLM> make_deepseek_v3(const ModelConfig& config,
                                           std::unique_ptr<Checkpoint> checkpoint,
                                           parallel::Communicator& comm,
                                           const WeightOptions& options) {
  if (config.hidden_act != "silu") {
    throw_input_error("{}/config.json: hidden_act '{}' is not supported (only 'silu')",
                      checkpoint->dir(), config.hidden_act);
  }
  return std::make_unique<DeepseekV3Model>(config, std::move(checkpoint), comm, options);
}

}  // namespace pagoda
