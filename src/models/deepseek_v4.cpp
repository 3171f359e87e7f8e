#include "models/deepseek_v4.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/ranges.h>

#include "core/error.h"
#include "kv/kv_cache_dtype.h"
#include "models/deepseek_indexer.h"
#include "models/deepseek_v4_compressor.h"
#include "models/deepseek_v4_config.h"
#include "models/linear_weights.h"
#include "models/mhc.h"
#include "models/output_rows.h"
#include "models/rope.h"
#include "models/vocab_parallel.h"
#include "models/weights.h"
#include "ops/moe.h"
#include "ops/ops.h"

namespace pagoda {

namespace {

// Cache order of a layer (deepseek_v4_kv_cache_specs).
enum CacheIndex { kWindow = 0, kCompressed = 1, kState = 2, kIndexerK = 3, kIndexerState = 4 };

// This rank's part under tensor parallelism: attention heads are split in
// whole output groups (wq_b rows, sinks, wo_a groups, wo_b columns); the
// shared K=V entry, the compressors, the indexer and every cache are
// replicated (one entry per token, like MLA's latent; the indexer then
// picks the same entries on every rank, as vLLM does); every routed and
// shared expert is split along its intermediate features, as for V3.
struct Shard {
  int rank = 0, size = 1;
  int64_t heads = 0, head_begin = 0;
  int64_t groups = 0, group_begin = 0;
  int64_t expert_inter = 0, expert_inter_begin = 0;
  int64_t shared_inter = 0, shared_inter_begin = 0;

  Shard(const ModelConfig& c, const DeepseekV4Config& v4, int rank_, int size_)
      : rank(rank_), size(size_) {
    auto split = [&](int64_t total, const char* what, int64_t& count, int64_t& begin) {
      const parallel::EvenSplit s = parallel::split_evenly(total, what, rank, size);
      count = s.count;
      begin = s.begin;
    };
    split(v4.o_groups, "o_groups", groups, group_begin);
    heads = groups * (c.num_attention_heads / v4.o_groups);
    head_begin = group_begin * (c.num_attention_heads / v4.o_groups);
    split(v4.moe_intermediate_size, "moe_intermediate_size", expert_inter, expert_inter_begin);
    split(v4.n_shared_experts * v4.moe_intermediate_size,
          "n_shared_experts x moe_intermediate_size", shared_inter, shared_inter_begin);
  }
};

// The c4a layers' lightning indexer over compressed keys (spec §3.2.4).
struct V4Indexer {
  ops::Matrix wq_b, weights_proj;
  std::unique_ptr<Compressor> compressor;
};

struct Layer {
  int64_t ratio = 0;
  HyperConnection hc_attn, hc_ffn;
  const float* attn_norm = nullptr;
  const float* ffn_norm = nullptr;
  // Attention (spec §3.2.2).
  ops::Matrix wq_a, wq_b, wkv, wo_b;
  std::vector<ops::Matrix> wo_a;  // this rank's output groups, [o_lora, (H/G) head_dim] each
  const float* q_norm = nullptr;
  const float* kv_norm = nullptr;
  const float* sink = nullptr;  // this rank's heads
  const std::vector<float>* inv_freq = nullptr;
  std::unique_ptr<Compressor> compressor;
  std::unique_ptr<V4Indexer> indexer;
  // MoE (spec §3.2.6).
  ops::Matrix router;
  std::vector<float> router_data;
  const float* gate_bias = nullptr;
  const int32_t* tid2eid = nullptr;  // hash layers: [vocab, top_k]
  std::vector<ops::MoeExpert> experts;
  ops::MoeExpert shared;
  bool has_shared = false;
};

// The MTP block (spec §3.2.7): X0 = h_proj(hnorm(each stream of the main
// model's final streams)) + e_proj(enorm(Embed(token t + 1))), a decoder
// block with SWA-only attention, its own hc_head and norm; embedding and
// head shared.
struct MtpBlock {
  ops::Matrix e_proj, h_proj;
  const float* enorm = nullptr;
  const float* hnorm = nullptr;
  const float* norm = nullptr;
  HyperConnection hc_head;
  Layer block;
};

struct Workspace {
  std::vector<float> X, X_next, y, a, o, post, C;
  std::vector<float> q_a, q, kv, attn, grouped, z;
  std::vector<int32_t> window_slots, comp_slots;
  // The window group window_slots was built for this step (-1: none yet):
  // layers whose window caches share a group share its lists.
  int32_t window_slots_group = -1;
  std::vector<int32_t> seq_of;  // [tokens] the sequence of each token row
  std::vector<float> entries;
  std::vector<int32_t> entry_rows;
  std::vector<int64_t> entry_slots;
  std::vector<float> index_q, index_w;
  std::vector<int32_t> index_slots, index_entries, one_token_starts, entry_counts, rows;
  std::vector<float> router_logits, topk_weights, moe_out, shared_out, gate_up, act, selected;
  std::vector<int32_t> topk_ids;
  ops::MoeScratch moe;
};

class DeepseekV4Model final : public CausalLM {
 public:
  DeepseekV4Model(const ModelConfig& config, std::unique_ptr<Checkpoint> checkpoint,
                  parallel::Communicator& comm, const WeightOptions& options)
      : config_(config),
        v4_(load_deepseek_v4_config(checkpoint->dir(), config)),
        comm_(comm),
        shard_(config_, v4_, comm.rank(), comm.size()),
        checkpoint_(std::move(checkpoint)),
        weights_(*checkpoint_),
        options_(options),
        vocab_(weights_, comm, config.vocab_size, config.hidden_size, "embed.weight",
               "head.weight") {
    weight_dtype_ = checkpoint_->get("embed.weight").dtype;
    init_rope();
    load();
  }

  const ModelConfig& config() const override { return config_; }
  DType weight_dtype() const override { return weight_dtype_; }
  size_t owned_weight_bytes() const override { return weights_.owned_bytes(); }
  bool repacked_weights() const override { return vocab_.head().packed; }

  std::vector<LayerKVCache> kv_cache_specs(DType kv_dtype) const override {
    return deepseek_v4_kv_cache_specs(config_, v4_, kv_dtype, indexer_dtype(kv_dtype));
  }
  // A decode token reads its window, the compressed entries it attends to
  // (c4a: index_topk of them, after scoring every indexer key; other
  // ratios: all), and on average c state rows (c * r rows once every r
  // positions, when an entry completes).
  int64_t kv_bytes_read_per_token(int64_t context, DType kv_dtype) const override {
    int64_t bytes = 0;
    for (const LayerKVCache& c : kv_cache_specs(kv_dtype)) {
      const KVCacheSpec& spec = c.spec;
      const int64_t ratio = v4_.compress_ratio(c.layer);
      int64_t entries = 0;
      if (c.name == "swa") {
        entries = std::min(context, spec.sliding_window);
      } else if (c.name == "compressed") {
        entries = context / ratio;
        if (DeepseekV4Config::overlaps(ratio)) entries = std::min(entries, v4_.index_topk);
      } else if (c.name == "indexer_k") {
        entries = context / 4;
      } else {  // compressor and indexer states
        entries = DeepseekV4Config::overlaps(ratio) ? 2 : 1;
      }
      bytes += entries * spec.entry_bytes;
    }
    return bytes;
  }

  // fp8: FlashMLA's V4 entries (584 B for 448 + 64) and e4m3 indexer keys.
  bool supports_kv_cache_dtype(DType d) const override {
    return d == DType::F32 || d == DType::BF16 || d == DType::F8E4M3;
  }
  bool has_indexer_cache() const override { return v4_.index_topk > 0; }
  void set_indexer_cache_dtype(DType d) override { indexer_choice_ = d; }
  std::string indexer_cache_label(DType kv_dtype) const override {
    if (v4_.index_topk == 0) return "";
    const DType d = indexer_dtype(kv_dtype);
    return d == DType::F8E4M3 || d == DType::F4E2M1 ? std::string(kv_dtype_label(d)) : "";
  }
  // Compressed caches hold 256 / r entries per 256-position block (the
  // seed's, vLLM's mandatory --block-size 256).
  int32_t default_block_size() const override { return 256; }

  int64_t weight_bytes_per_step() const override {
    int64_t total = matrix_bytes(vocab_.head());
    for (const Layer& w : layers_) total += layer_bytes_per_token(w);
    return total;
  }
  // Every layer is MoE: a step of num_tokens tokens reads the distinct
  // routed experts they are expected to route to (ops::expected_distinct_experts),
  // not top_k (the adaptive switch's verify cost).
  double expected_weight_bytes_per_step(int64_t num_tokens) const override {
    const double extra_experts =
        ops::expected_distinct_experts(static_cast<int>(v4_.n_routed_experts),
                                       static_cast<int>(v4_.num_experts_per_tok), num_tokens) -
        static_cast<double>(v4_.num_experts_per_tok);
    double total = static_cast<double>(weight_bytes_per_step());
    for (const Layer& w : layers_) {
      total += extra_experts * static_cast<double>(routed_expert_bytes(w.experts.front()));
    }
    return total;
  }

  std::string load_notes() const override {
    if (mtp_bytes_ == 0) return "";
    return fmt::format("MTP layer ({:.1f} MiB) {}", mtp_bytes_ / 1048576.0,
                       mtp_ ? "drafts (speculative decoding)" : "not run");
  }

  void forward(const BatchMetadata& batch, const KVCacheView& kv, float* logits) override;

  // MTP (spec §3.2.7): the block's only cache is a stack SWA layer's window.
  bool has_mtp_layer() const override { return v4_.num_nextn_predict_layers > 0; }
  void enable_mtp() override;
  std::vector<LayerKVCache> mtp_kv_cache_specs(DType kv_dtype) const override {
    for (const LayerKVCache& c : kv_cache_specs(kv_dtype)) {
      if (c.name == "swa") return {{0, c.name, c.spec}};
    }
    return {};
  }
  // The hc streams of every token's final stream tensor, before hc_head.
  int64_t mtp_hidden_size() const override { return v4_.hc_mult * config_.hidden_size; }
  const float* mtp_hidden_states() const override { return mtp_ ? mtp_hidden_.data() : nullptr; }
  void mtp_forward(const BatchMetadata& batch, const float* hidden, const KVCacheView& kv,
                   float* logits, float* hidden_out) override;
  int64_t mtp_output_rows() const override { return mtp_output_rows_; }
  // One MTP pass of one token: e_proj, h_proj (per stream: the same bytes),
  // its block and the shared head.
  int64_t mtp_weight_bytes_per_step() const override {
    if (!mtp_) return 0;
    return matrix_bytes(mtp_->e_proj) + matrix_bytes(mtp_->h_proj) +
           layer_bytes_per_token(mtp_->block) + matrix_bytes(vocab_.head());
  }

 private:
  void init_rope();
  void load();
  void load_attention(const std::string& p, Layer& w);
  void load_moe(const std::string& p, Layer& w);
  // A decoder block (layers.{l}. or mtp.{m}.) of compress ratio `ratio`.
  void load_layer(const std::string& p, int64_t ratio, Layer& w);
  int64_t check_mtp();
  // Weight bytes one token reads in a block: its dense matrices, the
  // shared expert and num_experts_per_tok routed ones.
  int64_t layer_bytes_per_token(const Layer& w) const;
  static int64_t routed_expert_bytes(const ops::MoeExpert& e);
  // Per-step setup of the workspace for a batch.
  void begin_step(const BatchMetadata& batch);
  // One decoder block over the streams ws_.X (spec §3.2.1): attention
  // then MoE, each between its hc collapse and expand.
  void run_block(Layer& w, const BatchMetadata& batch, const KVCacheView& kv, size_t layer,
                 int64_t tokens);
  // Its parts: the attention input ws_.a (and the hc coefficients) from
  // ws_.X, write_caches, then finish_block: attend and the rest.
  void attention_input(Layer& w, int64_t tokens);
  void finish_block(Layer& w, const BatchMetadata& batch, const KVCacheView& kv, size_t layer,
                    int64_t tokens);
  // logits of the rows `rows` of the streams ws_.X through hc_head, norm
  // and the shared head.
  void head_logits(const std::vector<int32_t>& rows, HyperConnection& hc_head, const float* norm,
                   float* logits);
  void reserve(int64_t tokens);
  // Attention over ws_.a (the normalised collapsed input), in two parts:
  // the rows' cache entries (the window entry, and the compressors'
  // states, compressed entries and indexer keys), then ...
  void write_caches(const Layer& w, const BatchMetadata& batch, const KVCacheView& kv,
                    size_t layer, int64_t tokens);
  // ... the rows' queries over the caches (their own entries written)
  // into ws_.o.
  void attend(const Layer& w, const BatchMetadata& batch, const KVCacheView& kv, size_t layer,
              int64_t tokens);
  void select_entries(const Layer& w, const BatchMetadata& batch, const KVCacheView& kv,
                      size_t layer, int64_t tokens, int comp_count);
  void moe(const Layer& w, const BatchMetadata& batch, int64_t tokens);
  // The layout of cache `cache` of a layer whose pages hold `entries` entries.
  ops::V4EntryLayout entry_layout(const KVCacheView& kv, size_t layer, int cache,
                                  int32_t entries) const;

  ModelConfig config_;
  DeepseekV4Config v4_;
  parallel::Communicator& comm_;
  Shard shard_;
  std::unique_ptr<Checkpoint> checkpoint_;
  WeightStore weights_;
  WeightOptions options_;
  VocabParallelEmbedding vocab_;
  DType weight_dtype_ = DType::F32;
  HyperConnectionParams hc_;
  HyperConnection hc_head_;
  const float* final_norm_ = nullptr;
  std::vector<Layer> layers_;
  // SWA layers: rope_theta, no YaRN; compressed layers: compress_rope_theta
  // with YaRN (spec §0.3, §1.2), for q, kv, the compressors and the indexer.
  std::vector<float> inv_freq_window_, inv_freq_compressed_;
  std::vector<float> ones_;  // the weightless per-head RMSNorm of q
  ops::MoeRouting routing_;
  // --indexer-cache-dtype as the engine resolved it (F32: not set, follow
  // the KV cache).
  DType indexer_choice_ = DType::F32;
  bool indexer_chosen() const { return indexer_choice_ != DType::F32; }
  DType indexer_dtype(DType kv_dtype) const { return indexer_chosen() ? indexer_choice_ : kv_dtype; }
  int64_t mtp_bytes_ = 0;
  std::unique_ptr<MtpBlock> mtp_;  // enable_mtp
  std::vector<float> mtp_hidden_;  // [tokens of the last forward (or more), hc, hidden]
  BatchMetadata mtp_outputs_;      // an MTP pass's output rows (output_rows_batch)
  int64_t mtp_output_rows_ = 0;
  Workspace ws_;
  int64_t capacity_ = 0;
};

void DeepseekV4Model::init_rope() {
  const auto rope = static_cast<int>(v4_.qk_rope_head_dim);
  inv_freq_window_ = rope_inv_freq(RopeScaling{}, config_.rope_theta, rope);
  // No YaRN magnitude scale on cos/sin or on the softmax (spec §0.3).
  inv_freq_compressed_ = rope_inv_freq(config_.rope_scaling, v4_.compress_rope_theta, rope);
  ones_.assign(static_cast<size_t>(config_.head_dim), 1.0f);
}

void DeepseekV4Model::load() {
  const int64_t h = config_.hidden_size;
  hc_ = {v4_.hc_mult, h, v4_.hc_sinkhorn_iters, v4_.hc_eps, config_.rms_norm_eps};
  final_norm_ = weights_.vector("norm.weight", h);
  hc_head_ = HyperConnection(weights_, "hc_head", hc_, /*head=*/true);
  routing_.num_experts = static_cast<int>(v4_.n_routed_experts);
  routing_.top_k = static_cast<int>(v4_.num_experts_per_tok);
  routing_.scoring = ops::MoeScoring::SqrtSoftplus;  // no expert groups in V4
  routing_.norm_topk_prob = v4_.norm_topk_prob;
  routing_.routed_scaling_factor = static_cast<float>(v4_.routed_scaling_factor);
  layers_.resize(config_.num_hidden_layers);
  for (int64_t l = 0; l < config_.num_hidden_layers; ++l) {
    load_layer("layers." + std::to_string(l) + ".", v4_.compress_ratio(l), layers_[l]);
  }
  mtp_bytes_ = check_mtp();
  vocab_.prepare(options_);
}

void DeepseekV4Model::load_layer(const std::string& p, int64_t ratio, Layer& w) {
  const int64_t h = config_.hidden_size;
  w.ratio = ratio;
  w.hc_attn = HyperConnection(weights_, p + "hc_attn", hc_);
  w.hc_ffn = HyperConnection(weights_, p + "hc_ffn", hc_);
  w.attn_norm = weights_.vector(p + "attn_norm.weight", h);
  w.ffn_norm = weights_.vector(p + "ffn_norm.weight", h);
  load_attention(p + "attn.", w);
  load_moe(p + "ffn.", w);
}

namespace {
int64_t bytes_if_loaded(const ops::Matrix& m) { return m.data ? matrix_bytes(m) : int64_t{0}; }
}  // namespace

int64_t DeepseekV4Model::routed_expert_bytes(const ops::MoeExpert& e) {
  return bytes_if_loaded(e.gate) + bytes_if_loaded(e.up) + bytes_if_loaded(e.down);
}

int64_t DeepseekV4Model::layer_bytes_per_token(const Layer& w) const {
  int64_t total = 0;
  for (const ops::Matrix* m : {&w.wq_a, &w.wq_b, &w.wkv, &w.wo_b, &w.router}) {
    total += bytes_if_loaded(*m);
  }
  for (const ops::Matrix& m : w.wo_a) total += bytes_if_loaded(m);
  total += v4_.num_experts_per_tok * routed_expert_bytes(w.experts.front());
  if (w.has_shared) total += routed_expert_bytes(w.shared);
  return total;
}

void DeepseekV4Model::load_attention(const std::string& p, Layer& w) {
  const int64_t h = config_.hidden_size, heads = config_.num_attention_heads;
  const int64_t d = config_.head_dim, ql = v4_.q_lora_rank, ol = v4_.o_lora_rank;
  const int64_t per_group = heads / v4_.o_groups;
  auto prep = [&](const ops::Matrix& m) { return prepare_linear(weights_, m, options_); };
  const auto eps = static_cast<float>(config_.rms_norm_eps);
  w.inv_freq = w.ratio > 0 ? &inv_freq_compressed_ : &inv_freq_window_;
  w.wq_a = prep(weights_.matrix(p + "wq_a.weight", ql, h));
  w.q_norm = weights_.vector(p + "q_norm.weight", ql);
  w.wq_b = prep(weights_.row_slice(p + "wq_b.weight", heads * d, ql, shard_.head_begin * d,
                                   shard_.heads * d));
  w.wkv = prep(weights_.matrix(p + "wkv.weight", d, h));
  w.kv_norm = weights_.vector(p + "kv_norm.weight", d);
  w.sink = weights_.vector_slice(p + "attn_sink", heads, shard_.head_begin, shard_.heads);
  for (int64_t g = shard_.group_begin; g < shard_.group_begin + shard_.groups; ++g) {
    w.wo_a.push_back(prep(weights_.row_slice(p + "wo_a.weight", v4_.o_groups * ol,
                                             per_group * d, g * ol, ol)));
  }
  w.wo_b = prep(weights_.col_slice(p + "wo_b.weight", h, v4_.o_groups * ol,
                                   shard_.group_begin * ol, shard_.groups * ol));
  if (w.ratio > 0) {
    w.compressor = std::make_unique<Compressor>(weights_, p + "compressor.", h, w.ratio, d,
                                                v4_.qk_rope_head_dim, w.inv_freq, eps,
                                                /*rotate=*/false, options_);
  }
  if (DeepseekV4Config::overlaps(w.ratio)) {
    auto idx = std::make_unique<V4Indexer>();
    const std::string ip = p + "indexer.";
    idx->wq_b = prep(weights_.matrix(ip + "wq_b.weight", v4_.index_n_heads * v4_.index_head_dim,
                                     ql));
    idx->weights_proj =
        prep(weights_.matrix(ip + "weights_proj.weight", v4_.index_n_heads, h));
    idx->compressor = std::make_unique<Compressor>(weights_, ip + "compressor.", h, 4,
                                                   v4_.index_head_dim, v4_.qk_rope_head_dim,
                                                   w.inv_freq, eps, /*rotate=*/true, options_);
    w.indexer = std::move(idx);
  }
}

void DeepseekV4Model::load_moe(const std::string& p, Layer& w) {
  const int64_t h = config_.hidden_size, e_count = v4_.n_routed_experts;
  const int64_t inter = v4_.moe_intermediate_size;
  auto prep = [&](const ops::Matrix& m) { return prepare_linear(weights_, m, options_); };
  // The router decides in f32 (the official code casts both operands).
  w.router = f32_copy(weights_.matrix(p + "gate.weight", e_count, h), w.router_data);
  const std::string tid = p + "gate.tid2eid";
  if (checkpoint_->has(tid)) {
    w.tid2eid = weights_.index_table(tid, config_.vocab_size, v4_.num_experts_per_tok, e_count);
  } else {
    w.gate_bias = weights_.vector(p + "gate.bias", e_count);
  }
  w.experts.resize(e_count);
  for (int64_t e = 0; e < e_count; ++e) {
    const std::string ep = p + "experts." + std::to_string(e) + ".";
    w.experts[e].gate = prep(weights_.row_slice(ep + "w1.weight", inter, h,
                                                shard_.expert_inter_begin, shard_.expert_inter));
    w.experts[e].up = prep(weights_.row_slice(ep + "w3.weight", inter, h,
                                              shard_.expert_inter_begin, shard_.expert_inter));
    w.experts[e].down = prep(weights_.col_slice(ep + "w2.weight", h, inter,
                                                shard_.expert_inter_begin, shard_.expert_inter));
  }
  if (v4_.n_shared_experts > 0) {
    const int64_t si = v4_.n_shared_experts * inter;
    const std::string sp = p + "shared_experts.";
    w.shared.gate = prep(weights_.row_slice(sp + "w1.weight", si, h, shard_.shared_inter_begin,
                                            shard_.shared_inter));
    w.shared.up = prep(weights_.row_slice(sp + "w3.weight", si, h, shard_.shared_inter_begin,
                                          shard_.shared_inter));
    w.shared.down = prep(weights_.col_slice(sp + "w2.weight", h, si, shard_.shared_inter_begin,
                                            shard_.shared_inter));
    w.has_shared = true;
  }
}

// The MTP blocks are checked present and counted at load; enable_mtp
// loads the first for the `mtp` proposer.
int64_t DeepseekV4Model::check_mtp() {
  int64_t bytes = 0;
  for (int64_t m = 0; m < v4_.num_nextn_predict_layers; ++m) {
    const std::string p = "mtp." + std::to_string(m) + ".";
    for (const char* leaf : {"e_proj.weight", "h_proj.weight", "enorm.weight", "hnorm.weight",
                             "norm.weight", "attn.wq_a.weight", "attn.wkv.weight",
                             "ffn.gate.weight", "hc_head_fn"}) {
      checkpoint_->get(p + leaf);  // InputError naming a missing one
    }
    for (const std::string& name : checkpoint_->names()) {
      if (name.rfind(p, 0) == 0) bytes += static_cast<int64_t>(checkpoint_->get(name).nbytes);
    }
  }
  return bytes;
}

void DeepseekV4Model::enable_mtp() {
  if (!has_mtp_layer()) {
    throw_input_error("{}: the checkpoint has no MTP block (num_nextn_predict_layers is 0)",
                      checkpoint_->dir());
  }
  if (mtp_) return;
  const int64_t h = config_.hidden_size, ratio = v4_.compress_ratio(config_.num_hidden_layers);
  if (ratio != 0) {  // spec §3.2.7: the MTP block attends to its window only
    throw_input_error("{}/config.json: compress_ratios gives the MTP block ratio {}; the mtp "
                      "proposer runs only a sliding-window MTP block (ratio 0)",
                      checkpoint_->dir(), ratio);
  }
  const std::string p = "mtp.0.";
  auto m = std::make_unique<MtpBlock>();
  m->e_proj = prepare_linear(weights_, weights_.matrix(p + "e_proj.weight", h, h), options_);
  m->h_proj = prepare_linear(weights_, weights_.matrix(p + "h_proj.weight", h, h), options_);
  m->enorm = weights_.vector(p + "enorm.weight", h);
  m->hnorm = weights_.vector(p + "hnorm.weight", h);
  m->norm = weights_.vector(p + "norm.weight", h);
  m->hc_head = HyperConnection(weights_, p + "hc_head", hc_, /*head=*/true);
  load_layer(p, 0, m->block);
  mtp_ = std::move(m);
}

void DeepseekV4Model::reserve(int64_t tokens) {
  if (tokens <= capacity_) return;
  capacity_ = tokens;
  Workspace& ws = ws_;
  const int64_t h = config_.hidden_size, hc = v4_.hc_mult, d = config_.head_dim;
  const int64_t hn = shard_.heads;
  ws.X.resize(tokens * hc * h);
  ws.X_next.resize(ws.X.size());
  ws.y.resize(tokens * h);
  ws.a.resize(tokens * h);
  ws.o.resize(tokens * h);
  ws.q_a.resize(tokens * v4_.q_lora_rank);
  ws.q.resize(tokens * hn * d);
  ws.kv.resize(tokens * d);
  ws.attn.resize(tokens * hn * d);
  ws.grouped.resize(tokens * hn * d);
  ws.z.resize(tokens * shard_.groups * v4_.o_lora_rank);
  ws.window_slots.resize(tokens * v4_.sliding_window);
  ws.index_q.resize(tokens * std::max<int64_t>(1, v4_.index_n_heads * v4_.index_head_dim));
  ws.index_w.resize(tokens * std::max<int64_t>(1, v4_.index_n_heads));
  ws.router_logits.resize(tokens * v4_.n_routed_experts);
  ws.topk_ids.resize(tokens * v4_.num_experts_per_tok);
  ws.topk_weights.resize(ws.topk_ids.size());
  ws.moe_out.resize(tokens * h);
  ws.shared_out.resize(tokens * h);
  const int64_t inter = std::max<int64_t>(1, shard_.shared_inter);
  ws.gate_up.resize(tokens * 2 * inter);
  ws.act.resize(tokens * inter);
}

ops::V4EntryLayout DeepseekV4Model::entry_layout(const KVCacheView& kv, size_t layer, int cache,
                                                 int32_t entries) const {
  ops::V4EntryLayout e;
  e.entries_per_page = entries;
  e.head_dim = static_cast<int>(config_.head_dim);
  e.rope_dim = static_cast<int>(v4_.qk_rope_head_dim);
  e.dtype = kv.dtype;
  e.page_bytes = kv.layers[layer][cache].page_bytes;
  return e;
}

// The compressed entries each token attends to, as slots of the layer's
// compressed cache in ws_.comp_slots [tokens, comp_count]: c4a, the
// indexer's top-k of the entries visible at the token's position (spec
// §3.2.4, §4.1); other ratios, every visible entry.
void DeepseekV4Model::select_entries(const Layer& w, const BatchMetadata& batch,
                                     const KVCacheView& kv, size_t layer, int64_t tokens,
                                     int comp_count) {
  Workspace& ws = ws_;
  const int64_t r = w.ratio;
  const int32_t bs = kv.block_size;
  const auto per_page = static_cast<int32_t>(bs / r);
  const KVGroupMetadata& comp_group = batch.kv_groups[kv.layers[layer][kCompressed].group];
  const ops::AttentionBatch comp_ab = attention_batch(batch, comp_group);
  ws.comp_slots.assign(static_cast<size_t>(tokens * comp_count), -1);
  auto entry_slot = [&](const int32_t* table, int64_t i) {
    return static_cast<int32_t>(table[i / per_page] * per_page + i % per_page);
  };
  if (!w.indexer) {
    for (int32_t s = 0; s < batch.num_seqs(); ++s) {
      const int32_t* table = comp_ab.block_table(s);
      for (int32_t t = batch.query_start_loc[s]; t < batch.query_start_loc[s + 1]; ++t) {
        const int64_t n = (batch.positions[t] + 1) / r;
        for (int64_t i = 0; i < n; ++i) ws.comp_slots[t * comp_count + i] = entry_slot(table, i);
      }
    }
    return;
  }
  // The indexer scores each token's visible keys: every token is its own
  // one-token "sequence" whose cached length is its count of visible
  // entries, read through its request's row of the indexer-key tables.
  const V4Indexer& idx = *w.indexer;
  const int64_t hi = v4_.index_n_heads, di = v4_.index_head_dim;
  ops::linear(ws.q_a.data(), tokens, idx.wq_b, nullptr, ws.index_q.data());
  ops::RopeParams rp;
  rp.num_heads = static_cast<int>(hi);
  rp.head_dim = static_cast<int>(di);
  rp.offset = static_cast<int>(di - v4_.qk_rope_head_dim);
  rp.rot_dim = static_cast<int>(v4_.qk_rope_head_dim);
  rp.layout = ops::RopeLayout::Interleaved;
  ops::rope(ws.index_q.data(), tokens, batch.positions.data(), w.inv_freq->data(), rp);
  hadamard_rotate(ws.index_q.data(), tokens * hi, di);
  ops::linear(ws.a.data(), tokens, idx.weights_proj, nullptr, ws.index_w.data());
  const auto head_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hi * di)));
  for (int64_t i = 0; i < tokens * hi; ++i) ws.index_w[i] *= head_scale;

  const KVCacheView::Cache& keys = kv.layers[layer][kIndexerK];
  const KVGroupMetadata& key_group = batch.kv_groups[keys.group];
  // Tokens that see no entry yet (positions < 3) select nothing; the others
  // are packed into the indexer's batch (q and w rows moved up in place).
  ws.one_token_starts.assign(1, 0);
  ws.entry_counts.clear();
  ws.rows.clear();
  std::vector<int32_t>& picked = ws.entry_rows;  // batch row of each packed token
  picked.clear();
  for (int32_t s = 0; s < batch.num_seqs(); ++s) {
    const int32_t row = key_group.block_table_rows.empty() ? s : key_group.block_table_rows[s];
    for (int32_t t = batch.query_start_loc[s]; t < batch.query_start_loc[s + 1]; ++t) {
      const auto count = static_cast<int32_t>((batch.positions[t] + 1) / 4);
      if (count == 0) continue;
      const auto at = static_cast<int64_t>(picked.size());
      if (at != t) {
        std::memmove(ws.index_q.data() + at * hi * di, ws.index_q.data() + t * hi * di,
                     hi * di * sizeof(float));
        std::memmove(ws.index_w.data() + at * hi, ws.index_w.data() + t * hi, hi * sizeof(float));
      }
      picked.push_back(t);
      ws.entry_counts.push_back(count);
      ws.rows.push_back(row);
      ws.one_token_starts.push_back(static_cast<int32_t>(picked.size()));
    }
  }
  const int k = comp_count;
  const auto packed = static_cast<int64_t>(picked.size());
  if (packed == 0) return;
  ops::AttentionBatch ab;
  ab.num_seqs = static_cast<int32_t>(packed);
  ab.query_start_loc = ws.one_token_starts.data();
  ab.seq_lens = ws.entry_counts.data();
  ab.block_tables = key_group.block_tables.data();
  ab.max_blocks_per_seq = key_group.max_blocks_per_seq;
  ab.block_table_rows = ws.rows.data();
  ops::IndexerLayout layout;
  layout.block_size = per_page;
  layout.head_dim = static_cast<int>(di);
  layout.dtype = indexer_dtype(kv.dtype);
  layout.page_stride = keys.page_bytes;
  ws.index_slots.resize(static_cast<size_t>(packed * k));
  ws.index_entries.resize(static_cast<size_t>(packed * k));
  ops::indexer_topk(ws.index_q.data(), ws.index_w.data(), keys.data, layout, ab,
                    static_cast<int>(hi), k, ws.index_slots.data(), ws.index_entries.data(),
                    ops::IndexerOrder::Position);
  // Back to each token's row, as slots of the main compressed cache (its
  // own block tables: another group).
  for (int64_t p = 0; p < packed; ++p) {
    const int32_t t = picked[p];
    const int32_t* table = comp_ab.block_table(ws.seq_of[t]);
    for (int j = 0; j < k; ++j) {
      const int32_t i = ws.index_entries[p * k + j];
      if (i >= 0) ws.comp_slots[t * k + j] = entry_slot(table, i);
    }
  }
}

void DeepseekV4Model::write_caches(const Layer& w, const BatchMetadata& batch,
                                   const KVCacheView& kv, size_t layer, int64_t tokens) {
  Workspace& ws = ws_;
  const int64_t d = config_.head_dim, rope = v4_.qk_rope_head_dim;
  const auto eps = static_cast<float>(config_.rms_norm_eps);
  const float* a = ws.a.data();
  // kv: one shared entry per token, RoPE on its last rope dims (as attend()
  // rotates each q head).
  ops::linear(a, tokens, w.wkv, nullptr, ws.kv.data());
  ops::rms_norm(ws.kv.data(), w.kv_norm, tokens, d, eps, ws.kv.data());
  ops::RopeParams rp;
  rp.head_dim = static_cast<int>(d);
  rp.offset = static_cast<int>(d - rope);
  rp.rot_dim = static_cast<int>(rope);
  rp.layout = ops::RopeLayout::Interleaved;
  rp.num_heads = 1;
  ops::rope(ws.kv.data(), tokens, batch.positions.data(), w.inv_freq->data(), rp);

  // The window cache: the token's own entry too (it attends to itself).
  const KVCacheView::Cache& window_cache = kv.layers[layer][kWindow];
  const ops::V4EntryLayout window = entry_layout(kv, layer, kWindow, window_cache.block_size);
  ops::write_v4_entries(ws.kv.data(), batch.kv_groups[window_cache.group].slot_mapping.data(),
                        tokens, window, window_cache.data);
  if (w.ratio == 0) return;
  // The compressors: an entry completed by a token is visible to it (spec
  // §4.3), so they run before attention.
  const int32_t bs = kv.block_size;
  const ops::V4EntryLayout comp =
      entry_layout(kv, layer, kCompressed, static_cast<int32_t>(bs / w.ratio));
  auto run = [&](Compressor& c, int state_cache, auto&& store) {
    const KVCacheView::Cache& sc = kv.layers[layer][state_cache];
    PagedRows rows{static_cast<uint8_t*>(sc.data), sc.page_bytes, sc.block_size,
                   c.state_row_bytes()};
    const int64_t n = c.run(a, batch, batch.kv_groups[sc.group], rows, tokens, ws.entries,
                            ws.entry_rows);
    store(n);
  };
  const KVGroupMetadata& comp_group = batch.kv_groups[kv.layers[layer][kCompressed].group];
  run(*w.compressor, kState, [&](int64_t n) {
    ws.entry_slots.resize(static_cast<size_t>(n));
    for (int64_t e = 0; e < n; ++e) ws.entry_slots[e] = comp_group.slot_mapping[ws.entry_rows[e]];
    ops::write_v4_entries(ws.entries.data(), ws.entry_slots.data(), n, comp,
                          kv.layers[layer][kCompressed].data);
  });
  if (w.indexer) {
    const KVCacheView::Cache& keys = kv.layers[layer][kIndexerK];
    const KVGroupMetadata& key_group = batch.kv_groups[keys.group];
    run(*w.indexer->compressor, kIndexerState, [&](int64_t n) {
      ws.entry_slots.resize(static_cast<size_t>(n));
      for (int64_t e = 0; e < n; ++e) ws.entry_slots[e] = key_group.slot_mapping[ws.entry_rows[e]];
      ops::IndexerLayout layout;
      layout.block_size = static_cast<int>(bs / 4);
      layout.head_dim = static_cast<int>(v4_.index_head_dim);
      layout.dtype = indexer_dtype(kv.dtype);
      layout.page_stride = keys.page_bytes;
      ops::write_indexer_k(ws.entries.data(), ws.entry_slots.data(), n, layout, keys.data);
    });
  }
}

void DeepseekV4Model::attend(const Layer& w, const BatchMetadata& batch, const KVCacheView& kv,
                             size_t layer, int64_t tokens) {
  Workspace& ws = ws_;
  const int64_t d = config_.head_dim, hn = shard_.heads, rope = v4_.qk_rope_head_dim;
  const auto eps = static_cast<float>(config_.rms_norm_eps);
  const float* a = ws.a.data();
  // q: the q LoRA (shared with the indexer), per-head RMS without weight,
  // RoPE on each head's last rope dims.
  ops::linear(a, tokens, w.wq_a, nullptr, ws.q_a.data());
  ops::rms_norm(ws.q_a.data(), w.q_norm, tokens, v4_.q_lora_rank, eps, ws.q_a.data());
  ops::linear(ws.q_a.data(), tokens, w.wq_b, nullptr, ws.q.data());
  ops::rms_norm(ws.q.data(), ones_.data(), tokens * hn, d, eps, ws.q.data());
  ops::RopeParams rp;
  rp.head_dim = static_cast<int>(d);
  rp.offset = static_cast<int>(d - rope);
  rp.rot_dim = static_cast<int>(rope);
  rp.layout = ops::RopeLayout::Interleaved;
  rp.num_heads = static_cast<int>(hn);
  ops::rope(ws.q.data(), tokens, batch.positions.data(), w.inv_freq->data(), rp);

  const KVCacheView::Cache& window_cache = kv.layers[layer][kWindow];
  const int32_t window_page = window_cache.block_size;
  const ops::V4EntryLayout window = entry_layout(kv, layer, kWindow, window_page);
  const KVGroupMetadata& window_group = batch.kv_groups[window_cache.group];
  int comp_count = 0;
  ops::V4EntryLayout comp = window;
  const void* comp_data = nullptr;
  if (w.ratio > 0) {
    comp = entry_layout(kv, layer, kCompressed, static_cast<int32_t>(kv.block_size / w.ratio));
    comp_data = kv.layers[layer][kCompressed].data;
    if (w.indexer) {
      comp_count = static_cast<int>(v4_.index_topk);
    } else {
      int32_t longest = 0;
      for (int64_t t = 0; t < tokens; ++t) longest = std::max(longest, batch.positions[t] + 1);
      comp_count = static_cast<int>(longest / w.ratio);
    }
    select_entries(w, batch, kv, layer, tokens, comp_count);
  }

  // Window slots: positions max(0, t - W + 1) .. t (spec §4.1), once per
  // window group and step.
  const int64_t W = v4_.sliding_window;
  const ops::AttentionBatch wab = attention_batch(batch, window_group);
  for (int32_t s = 0; s < batch.num_seqs() && ws.window_slots_group != window_cache.group; ++s) {
    const int32_t* table = wab.block_table(s);
    for (int32_t t = batch.query_start_loc[s]; t < batch.query_start_loc[s + 1]; ++t) {
      const int64_t pos = batch.positions[t];
      int32_t* out = ws.window_slots.data() + t * W;
      int64_t n = 0;
      for (int64_t j = std::max<int64_t>(0, pos - W + 1); j <= pos; ++j) {
        out[n++] = table[j / window_page] * window_page + static_cast<int32_t>(j % window_page);
      }
      for (; n < W; ++n) out[n] = -1;
    }
  }
  ws.window_slots_group = window_cache.group;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  ops::v4_sparse_attention(ws.q.data(), tokens, static_cast<int>(hn), window_cache.data, window,
                           ws.window_slots.data(), static_cast<int>(W), comp_data, comp,
                           ws.comp_slots.data(), comp_count, w.sink, scale, ws.attn.data());
  // V = K carries each key's rotation: turn the output back to the query's
  // frame (spec §3.2.2).
  rp.num_heads = static_cast<int>(hn);
  rp.inverse = true;
  ops::rope(ws.attn.data(), tokens, batch.positions.data(), w.inv_freq->data(), rp);

  // Grouped low-rank output: each group of heads through its own wo_a
  // slice, then wo_b over the concatenation (spec §3.2.2).
  const int64_t per_group = config_.num_attention_heads / v4_.o_groups;
  const int64_t gw = per_group * d, ol = v4_.o_lora_rank, gn = shard_.groups;
  for (int64_t g = 0; g < gn; ++g) {
    float* in = ws.grouped.data();
    for (int64_t t = 0; t < tokens; ++t) {
      std::memcpy(in + t * gw, ws.attn.data() + (t * hn + g * per_group) * d, gw * sizeof(float));
    }
    ops::linear(in, tokens, w.wo_a[g], nullptr, ws.z.data() + g * ol, gn * ol);
  }
  ops::linear(ws.z.data(), tokens, w.wo_b, nullptr, ws.o.data());
  comm_.all_reduce_sum(ws.o.data(), tokens * config_.hidden_size);
}

void DeepseekV4Model::moe(const Layer& w, const BatchMetadata& batch, int64_t tokens) {
  Workspace& ws = ws_;
  const int64_t h = config_.hidden_size, e_count = v4_.n_routed_experts;
  const int k = static_cast<int>(v4_.num_experts_per_tok);
  const float* a = ws.a.data();
  ops::linear(a, tokens, w.router, nullptr, ws.router_logits.data());
  // sqrtsoftplus scores; hash layers take tid2eid[token], the others the
  // top-k of score + bias; weights always from the unbiased scores.
  ops::MoeRouting routing = routing_;
  routing.correction_bias = w.gate_bias;
  if (w.tid2eid != nullptr) {
    ops::moe_route_hashed(ws.router_logits.data(), batch.token_ids.data(), tokens, w.tid2eid,
                          config_.vocab_size, routing, ws.topk_ids.data(),
                          ws.topk_weights.data());
  } else {
    ops::moe_route(ws.router_logits.data(), tokens, routing, ws.topk_ids.data(),
                   ws.topk_weights.data());
  }
  const auto limit = static_cast<float>(v4_.swiglu_limit);
  ops::moe_experts_forward(a, tokens, ws.topk_ids.data(), ws.topk_weights.data(), k,
                           w.experts.data(), static_cast<int>(e_count), ws.moe,
                           ws.moe_out.data(), limit);
  if (w.has_shared) {
    // The official code applies no clamp to the shared expert (spec §8.2).
    const ops::MoeExpert& e = w.shared;
    const int64_t inter = shard_.shared_inter;
    const ops::LinearOutput gate_up[2] = {{&e.gate, nullptr, ws.gate_up.data(), 2 * inter},
                                          {&e.up, nullptr, ws.gate_up.data() + inter, 2 * inter}};
    ops::linear_multi(a, tokens, gate_up, 2);
    ops::silu_mul(ws.gate_up.data(), tokens, inter, ws.act.data());
    ops::linear(ws.act.data(), tokens, e.down, nullptr, ws.shared_out.data());
    for (int64_t i = 0; i < tokens * h; ++i) ws.moe_out[i] += ws.shared_out[i];
  }
  comm_.all_reduce_sum(ws.moe_out.data(), tokens * h);
  std::memcpy(ws.o.data(), ws.moe_out.data(), tokens * h * sizeof(float));
}

void DeepseekV4Model::begin_step(const BatchMetadata& batch) {
  const int64_t tokens = batch.num_tokens();
  reserve(tokens);
  Workspace& ws = ws_;
  ws.window_slots_group = -1;
  ws.seq_of.resize(static_cast<size_t>(tokens));
  for (int32_t s = 0; s < batch.num_seqs(); ++s) {
    for (int32_t t = batch.query_start_loc[s]; t < batch.query_start_loc[s + 1]; ++t) ws.seq_of[t] = s;
  }
}

void DeepseekV4Model::run_block(Layer& w, const BatchMetadata& batch, const KVCacheView& kv,
                                size_t layer, int64_t tokens) {
  attention_input(w, tokens);
  write_caches(w, batch, kv, layer, tokens);
  finish_block(w, batch, kv, layer, tokens);
}

void DeepseekV4Model::attention_input(Layer& w, int64_t tokens) {
  const auto eps = static_cast<float>(config_.rms_norm_eps);
  w.hc_attn.collapse(ws_.X.data(), tokens, ws_.y.data(), &ws_.post, &ws_.C);
  ops::rms_norm(ws_.y.data(), w.attn_norm, tokens, config_.hidden_size, eps, ws_.a.data());
}

void DeepseekV4Model::finish_block(Layer& w, const BatchMetadata& batch, const KVCacheView& kv,
                                   size_t layer, int64_t tokens) {
  Workspace& ws = ws_;
  const int64_t h = config_.hidden_size;
  const auto eps = static_cast<float>(config_.rms_norm_eps);
  attend(w, batch, kv, layer, tokens);
  w.hc_attn.expand(ws.o.data(), ws.X.data(), tokens, ws.post, ws.C, ws.X_next.data());
  std::swap(ws.X, ws.X_next);
  w.hc_ffn.collapse(ws.X.data(), tokens, ws.y.data(), &ws.post, &ws.C);
  ops::rms_norm(ws.y.data(), w.ffn_norm, tokens, h, eps, ws.a.data());
  moe(w, batch, tokens);
  w.hc_ffn.expand(ws.o.data(), ws.X.data(), tokens, ws.post, ws.C, ws.X_next.data());
  std::swap(ws.X, ws.X_next);
}

void DeepseekV4Model::head_logits(const std::vector<int32_t>& rows_wanted,
                                  HyperConnection& hc_head, const float* norm, float* logits) {
  Workspace& ws = ws_;
  const int64_t h = config_.hidden_size, hc = v4_.hc_mult;
  const auto eps = static_cast<float>(config_.rms_norm_eps);
  const auto rows = static_cast<int64_t>(rows_wanted.size());
  ws.selected.resize(static_cast<size_t>(rows * hc * h));
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(ws.selected.data() + r * hc * h, ws.X.data() + int64_t{rows_wanted[r]} * hc * h,
                hc * h * sizeof(float));
  }
  hc_head.collapse(ws.selected.data(), rows, ws.y.data());
  ops::rms_norm(ws.y.data(), norm, rows, h, eps, ws.y.data());
  vocab_.logits(ws.y.data(), rows, logits);
}

void DeepseekV4Model::forward(const BatchMetadata& batch, const KVCacheView& kv, float* logits) {
  const int64_t tokens = batch.num_tokens(), h = config_.hidden_size, hc = v4_.hc_mult;
  PAGODA_CHECK(kv.layers.size() == layers_.size(), "kv layers {}", kv.layers.size());
  begin_step(batch);
  Workspace& ws = ws_;
  // Every stream starts as the token's embedding.
  vocab_.embed(batch.token_ids.data(), tokens, ws.y.data());
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t k = 0; k < hc; ++k) {
      std::memcpy(ws.X.data() + (t * hc + k) * h, ws.y.data() + t * h, h * sizeof(float));
    }
  }
  for (size_t i = 0; i < layers_.size(); ++i) run_block(layers_[i], batch, kv, i, tokens);
  // The head: only the rows whose logits are wanted.
  head_logits(batch.logits_indices, hc_head_, final_norm_, logits);
  // The MTP block's input: the final streams, handed over rather than
  // copied (for a long prefill chunk, hc x hidden floats a token); the
  // workspace takes the other buffer at its reserved size.
  if (mtp_) {
    std::swap(mtp_hidden_, ws.X);
    ws.X.resize(ws.X_next.size());
  }
}

void DeepseekV4Model::mtp_forward(const BatchMetadata& batch, const float* hidden,
                                  const KVCacheView& kv, float* logits, float* hidden_out) {
  PAGODA_CHECK(mtp_, "mtp_forward before enable_mtp");
  PAGODA_CHECK(comm_.size() == 1, "the MTP block runs on a single rank");
  PAGODA_CHECK(kv.layers.size() == layers_.size() + 1, "kv layers {} (the MTP block's last)",
               kv.layers.size());
  const int64_t tokens = batch.num_tokens(), h = config_.hidden_size, hc = v4_.hc_mult;
  const auto eps = static_cast<float>(config_.rms_norm_eps);
  begin_step(batch);
  Workspace& ws = ws_;
  MtpBlock& m = *mtp_;
  // e_proj(enorm(e)), e the embedding of token t + 1, zeroed at position 0
  // as vLLM does (as for V3).
  vocab_.embed(batch.token_ids.data(), tokens, ws.y.data());
  ops::rms_norm(ws.y.data(), m.enorm, tokens, h, eps, ws.a.data());
  for (int64_t t = 0; t < tokens; ++t) {
    if (batch.positions[t] == 0) std::fill_n(ws.a.data() + t * h, h, 0.0f);
  }
  ops::linear(ws.a.data(), tokens, m.e_proj, nullptr, ws.o.data());
  // h_proj(hnorm(X[k])) for every stream k, plus the embedding term.
  ops::rms_norm(hidden, m.hnorm, tokens * hc, h, eps, ws.X_next.data());
  ops::linear(ws.X_next.data(), tokens * hc, m.h_proj, nullptr, ws.X.data());
  for (int64_t t = 0; t < tokens; ++t) {
    const float* e = ws.o.data() + t * h;
    for (int64_t k = 0; k < hc; ++k) {
      float* x = ws.X.data() + (t * hc + k) * h;
      for (int64_t j = 0; j < h; ++j) x[j] += e[j];
    }
  }
  // Every row's window entry (later positions read it); the rest of the
  // block and the head only for the rows whose outputs are wanted
  // (models/output_rows.h).
  const size_t layer = layers_.size();
  attention_input(m.block, tokens);
  write_caches(m.block, batch, kv, layer, tokens);
  output_rows_batch(batch, mtp_outputs_);
  const BatchMetadata& out = mtp_outputs_;
  const int64_t rows = out.num_tokens();
  mtp_output_rows_ += rows;
  if (rows == 0) return;
  gather_rows(ws.X.data(), hc * h, batch.logits_indices);
  begin_step(out);
  attention_input(m.block, rows);
  finish_block(m.block, out, kv, layer, rows);
  head_logits(out.logits_indices, m.hc_head, m.norm, logits);
  // The block's output streams.
  std::memcpy(hidden_out, ws.X.data(), rows * hc * h * sizeof(float));
}

}  // namespace

std::unique_ptr<CausalLM> make_deepseek_v4(const ModelConfig& config,
                                           std::unique_ptr<Checkpoint> checkpoint,
                                           parallel::Communicator& comm,
                                           const WeightOptions& options) {
  if (config.hidden_act != "silu") {
    throw_input_error("{}/config.json: hidden_act '{}' is not supported (only 'silu')",
                      checkpoint->dir(), config.hidden_act);
  }
  return std::make_unique<DeepseekV4Model>(config, std::move(checkpoint), comm, options);
}

}  // namespace pagoda
