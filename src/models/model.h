// The model interface the engine drives: plain batch metadata in, logits out.
// Models know nothing about requests, schedulers or block allocation; they
// see the step's tokens, where each token's K/V goes (slot_mapping) and where
// each sequence's K/V lives (block_tables).
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kv/kv_cache_dtype.h"
#include "kv/kv_cache_memory.h"
#include "kv/kv_cache_spec.h"
#include "models/config.h"
#include "models/quantize.h"
#include "ops/ops.h"
#include "parallel/communicator.h"

namespace pagoda {

// Where one KV-cache group's caches write and read this step (each group of
// caches with the same spec has its own block tables; kv/kv_cache_plan.h).
struct KVGroupMetadata {
  // Token positions one block-table entry (one page) of this group covers:
  // the group's block size (KVCacheGroup::block_size), which may be smaller
  // than the engine's (DeepSeek V4's 64-position window pages, 4-position
  // compressor-state pages).
  int32_t block_size = 0;
  // [num_tokens] entry slot each token writes (page * entries per page +
  // entry in page), -1 where it writes none (a compressed cache writes
  // once per compress_ratio positions).
  std::vector<int64_t> slot_mapping;
  // Persistent rows of max_blocks_per_seq block ids (padded with 0), one
  // per running request, kept between steps: a step appends only the
  // blocks its requests gained. Sequence s of the step uses row
  // block_table_rows[s].
  std::vector<int32_t> block_tables;
  int32_t max_blocks_per_seq = 0;
  std::vector<int32_t> block_table_rows;  // [num_seqs]
};

// One forward step over several sequences, flattened (vLLM's varlen layout).
struct BatchMetadata {
  std::vector<int32_t> token_ids;        // [num_tokens] new tokens of all sequences
  std::vector<int32_t> positions;        // [num_tokens] position of each token in its sequence
  std::vector<int32_t> query_start_loc;  // [num_seqs + 1]
  std::vector<int32_t> seq_lens;         // [num_seqs] cached + new tokens after this step
  std::vector<KVGroupMetadata> kv_groups;
  // Rows of the flattened tokens whose logits are wanted (usually the last
  // token of each sequence that finishes its prompt or decodes).
  std::vector<int32_t> logits_indices;

  int64_t num_tokens() const { return static_cast<int64_t>(token_ids.size()); }
  int32_t num_seqs() const { return static_cast<int32_t>(seq_lens.size()); }
};

// How attention sees the step's sequences through one group's block tables
// (sliding_window left 0 for the caller to set).
inline ops::AttentionBatch attention_batch(const BatchMetadata& batch,
                                           const KVGroupMetadata& group) {
  ops::AttentionBatch ab;
  ab.num_seqs = batch.num_seqs();
  ab.query_start_loc = batch.query_start_loc.data();
  ab.seq_lens = batch.seq_lens.data();
  ab.block_tables = group.block_tables.data();
  ab.max_blocks_per_seq = group.max_blocks_per_seq;
  ab.block_table_rows = group.block_table_rows.empty() ? nullptr : group.block_table_rows.data();
  return ab;
}

class CausalLM {
 public:
  virtual ~CausalLM() = default;
  virtual const ModelConfig& config() const = 0;
  // The caches every layer keeps (kv/kv_cache_spec.h), for a cache whose
  // elements are kv_dtype (the resolved --kv-cache-dtype). Under tensor
  // parallelism, this rank's share (its heads).
  virtual std::vector<LayerKVCache> kv_cache_specs(DType kv_dtype) const = 0;
  // How the checkpoint stores its weights (before any load-time
  // quantization): what --kv-cache-dtype auto follows.
  virtual DType weight_dtype() const { return DType::F32; }
  // Runs one step: writes the new tokens' K/V into `kv`, and fills `logits`
  // [batch.logits_indices.size(), vocab_size] (row-major). Under tensor
  // parallelism every rank calls it with the same batch (its own KV shard);
  // only rank 0 gets logits (null on the other ranks).
  virtual void forward(const BatchMetadata& batch, const KVCacheView& kv, float* logits) = 0;
  // Bytes of weight matrices one decode step streams from memory (every
  // linear layer and the LM head once; embedding rows are negligible), as
  // held in memory (after any load-time conversion). For benchmarks.
  virtual int64_t weight_bytes_per_step() const { return 0; }
  // Expected bytes of weight matrices a step of num_tokens query tokens of
  // one sequence reads (a speculative verify step: 1 + k tokens). A dense
  // model reads every matrix once whatever the tokens, so this is
  // weight_bytes_per_step(); a MoE layer reads each distinct routed expert
  // its tokens pick (ops::expected_distinct_experts), so a MoE model says so.
  virtual double expected_weight_bytes_per_step(int64_t num_tokens) const {
    (void)num_tokens;
    return static_cast<double>(weight_bytes_per_step());
  }
  // The same for one token through the MTP layer and head (0 without MTP).
  virtual int64_t mtp_weight_bytes_per_step() const { return 0; }
  // Bytes of KV cache one decode token reads when `context` positions are
  // cached, for benchmarks' rooflines. By default every entry a
  // cache still holds for that query: all positions (sliding window: the
  // window), one entry per compress_ratio positions. A model whose
  // attention reads fewer (DeepSeek V3.2: only its index_topk latents)
  // says so.
  virtual int64_t kv_bytes_read_per_token(int64_t context, DType kv_dtype) const {
    int64_t bytes = 0;
    for (const LayerKVCache& c : kv_cache_specs(kv_dtype)) {
      const int64_t positions =
          c.spec.sliding_window > 0 ? std::min(context, c.spec.sliding_window) : context;
      bytes += positions / c.spec.compress_ratio * c.spec.entry_bytes;
    }
    return bytes;
  }
  // Bytes of weights copied or converted at load (the rest are used in
  // place from the checkpoint mapping).
  virtual size_t owned_weight_bytes() const { return 0; }
  // Whether the linear matrices (bf16 or int8) were repacked into GEMM
  // panels at load (ops/packed.h).
  virtual bool repacked_weights() const { return false; }
  // Whether kv_cache_specs and forward handle a cache of this element type
  // (F32 and BF16 everywhere; F8E4M3 where the model has a format for it).
  virtual bool supports_kv_cache_dtype(DType d) const {
    return d == DType::F32 || d == DType::BF16;
  }
  // Sees each layer's selection of a model that attends to a subset of the
  // cached tokens (DeepSeek V3.2's indexer top-k): `positions` [tokens of
  // the batch, topk], each token's picks as positions in its own sequence,
  // -1 padded, in no particular order. For tests (`pagoda logits
  // --dump-index-topk`); while unset nothing is called or copied.
  using IndexTopkObserver = std::function<void(int32_t layer, const BatchMetadata& batch,
                                               const int32_t* positions, int64_t topk)>;
  // False (and nothing kept) for a model without such a selection.
  virtual bool set_index_topk_observer(IndexTopkObserver observer) {
    (void)observer;
    return false;
  }
  // Models with a separately formatted indexer-key cache (DeepSeek V4):
  // whether they take --indexer-cache-dtype, and setting it (before
  // kv_cache_specs; the element type of its keys: F32, BF16, F8E4M3 or
  // F4E2M1). The default refuses.
  virtual bool has_indexer_cache() const { return false; }
  virtual void set_indexer_cache_dtype(DType /*d*/) {}
  // The indexer keys' format when it is not implied by the KV cache dtype
  // ("fp8", "fp4"; "" otherwise), for logs and the reference comparisons.
  virtual std::string indexer_cache_label(DType /*kv_dtype*/) const { return ""; }
  // Tokens per KV block when the user does not choose (--block-size).
  virtual int32_t default_block_size() const { return 16; }
  // Multi-token prediction (DeepSeek's MTP layer, spec §3.1.5), the `mtp`
  // speculative proposer's draft model. Whether the checkpoint has one.
  virtual bool has_mtp_layer() const { return false; }
  // Loads the (first) MTP layer's weights and turns it on: every forward
  // then keeps each token's hidden state (mtp_hidden_states). InputError
  // for a model without one.
  virtual void enable_mtp() {}
  // The MTP layer's caches (layers numbered from 0), which the proposer
  // adds to the plan after the model's own (the same specs as a stack
  // layer's, so they share its groups, block tables and slots).
  virtual std::vector<LayerKVCache> mtp_kv_cache_specs(DType /*kv_dtype*/) const { return {}; }
  // Floats of one token's hidden state as the MTP layer takes it: the
  // hidden size (DeepSeek V3), or hc_mult streams of it (V4).
  virtual int64_t mtp_hidden_size() const { return config().hidden_size; }
  // [tokens of the last forward, mtp_hidden_size]: the main model's hidden
  // state of each token as the MTP layer takes it (DeepSeek V3: after the
  // final RMSNorm, as vLLM feeds it; V4: the final hc streams before
  // hc_head, spec §3.2.7); null while MTP is off.
  virtual const float* mtp_hidden_states() const { return nullptr; }
  // Runs the MTP layer on the pairs (hidden[t], batch.token_ids[t]) at
  // batch.positions[t] (hidden_state of position p, token p + 1): writes
  // its K/V at the batch's slots (kv: the plan's layers, the model's and
  // then the MTP layer's), fills `logits` [logits_indices, vocab]
  // (each row predicts the token after batch.token_ids[t]) and `hidden_out`
  // [logits_indices, mtp_hidden_size] with the layer's output at those rows,
  // the hidden input of a chained next draft. Only the logits_indices rows
  // (strictly increasing) run the block past its cache writes (attention,
  // FFN, head: models/output_rows.h); the others cost the input projections
  // and the K/V write. Single rank only.
  virtual void mtp_forward(const BatchMetadata& /*batch*/, const float* /*hidden*/,
                           const KVCacheView& /*kv*/, float* /*logits*/, float* /*hidden_out*/) {}
  // Rows mtp_forward ran past the cache writes so far (tests: a pass costs
  // the block only where its outputs are used).
  virtual int64_t mtp_output_rows() const { return 0; }
  // Anything about the load a user should see in the start-up line (e.g.
  // layers loaded but not run); "" for nothing.
  virtual std::string load_notes() const { return ""; }
};

// Builds the model for DIR from config.json's architectures[0] (registry.cpp).
// Throws InputError for an unknown architecture or a checkpoint that does not
// match the config (tensor name, shape, dtype). With a communicator of size
// tp > 1 the model holds this rank's shard (ParallelConfigError if the
// model's head counts do not split tp ways). Quantization::Int8 quantizes
// every linear layer and the LM head after sharding (embeddings stay);
// otherwise bf16 ones are repacked (ops/packed.h) unless options.repack is off.
std::unique_ptr<CausalLM> load_model(const std::string& dir);
std::unique_ptr<CausalLM> load_model(const std::string& dir, parallel::Communicator& comm,
                                     const WeightOptions& options = {});

// The KV caches the model in DIR declares (whole model, one rank), from
// its config alone: what `pagoda kv-plan` sizes. InputError as load_model.
// indexer: DeepSeek V4's indexer-key format (--indexer-cache-dtype);
// InputError for any other architecture unless Auto.
std::vector<LayerKVCache> kv_cache_specs_of_config(
    const std::string& dir, DType kv_dtype, IndexerCacheDType indexer = IndexerCacheDType::Auto);

// Resident bytes of this process's mappings of *.safetensors files (from
// /proc/self/smaps): the checkpoint pages this rank actually touched.
int64_t resident_checkpoint_bytes();

}  // namespace pagoda
