// The engine loop: schedule -> run the model -> sample -> update requests.
// LLM (offline) and, later, the async server engine drive it with step().
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/model_runner.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "engine/spec_decode/mtp_proposer.h"
#include "engine/spec_decode/proposer.h"
#include "engine/spec_decode/spec_decode_metrics.h"
#include "engine/spec_decode/speculative_config.h"
#include "kv/kv_cache_dtype.h"
#include "kv/kv_cache_manager.h"
#include "models/model.h"
#include "structured/grammar_compiler.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {

struct EngineOptions {
  int64_t kv_cache_memory = 0;  // bytes for the KV pool; 0 = sized automatically
  // Element type of the KV cache (auto: bf16 for bf16 checkpoints, else f32).
  KVCacheDType kv_cache_dtype = KVCacheDType::Auto;
  IndexerCacheDType indexer_cache_dtype = IndexerCacheDType::Auto;  // DeepSeek V4 only
  // Tokens per KV block; 0: the model's default (CausalLM::default_block_size:
  // 16, or 64 for DeepSeek V3.2's sparse caches). options() reports the
  // resolved value.
  int32_t block_size = 0;
  int32_t max_num_seqs = 256;
  int32_t max_num_batched_tokens = 2048;
  int64_t max_model_len = 0;  // 0 = the model's max_position_embeddings
  int num_threads = 0;        // 0 = all cores
  bool enable_prefix_caching = true;
  SchedulingPolicy scheduling_policy = SchedulingPolicy::Fcfs;
  // Tokens per step for requests scoring their prompt (prompt_logprobs),
  // each a logits row (SchedulerConfig::max_num_scored_prompt_tokens).
  int32_t max_num_scored_prompt_tokens = 512;
  // Ranks the model is split over (one MPI process each, launched by
  // mpirun -np N); must equal the number of processes.
  int tensor_parallel_size = 1;
  // Load-time weight quantization of every linear layer (--quantization).
  Quantization quantization = Quantization::None;
  // Pack bf16 weight matrices into GEMM panels at load (--no-repack: off).
  bool repack_weights = true;
  // Touch every page of the KV pool at start, as vLLM and llama.cpp do by
  // zeroing theirs: a long-running server has touched its whole pool, so
  // the benchmarks do this to time that steady state rather than the kernel
  // clearing fresh pages under the first requests' KV writes. Off by
  // default: the pool may be half the RAM, and a short run touches little.
  bool prefault_kv_cache = false;
  // Speculative decoding (--speculative-config); none: off.
  std::optional<SpeculativeConfig> speculative_config;
};

// Engine-wide counters (the server's /metrics reads these).
struct EngineStats {
  size_t num_running = 0;
  size_t num_waiting = 0;
  int32_t kv_blocks_total = 0;  // pages of all pools together
  int32_t kv_blocks_free = 0;  // includes cached blocks no request uses
  // Token positions the pools hold: as many sequences of max_model_len as
  // the scarcest pool has room for, times max_model_len (a dense model:
  // blocks x block size when max_model_len is a multiple of it).
  int64_t kv_token_capacity = 0;
  int64_t prefix_cache_queried_tokens = 0;
  int64_t prefix_cache_hit_tokens = 0;
  int64_t num_preemptions = 0;  // since start, all requests
  SpecDecodeStats spec_decode;  // all zero unless speculating
  double prefix_cache_hit_rate() const {
    return prefix_cache_queried_tokens ? static_cast<double>(prefix_cache_hit_tokens) /
                                             static_cast<double>(prefix_cache_queried_tokens)
                                       : 0.0;
  }
};

struct RequestMetrics {
  int64_t num_prompt_tokens = 0;
  int64_t num_cached_tokens = 0;  // prompt tokens served by the prefix cache
  int64_t num_output_tokens = 0;
  int64_t num_preemptions = 0;
  double time_to_first_token_s = 0;
  double time_per_output_token_s = 0;  // after the first token
  double e2e_latency_s = 0;
};

// A request's state after a step: cumulative ids and text, plus what is new
// (SamplingParams::output_kind: Delta outputs carry only what is new).
struct RequestOutput {
  std::string request_id;
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> token_ids;  // all generated ids so far
  std::string text;                // all text safe to show so far
  std::vector<int32_t> new_token_ids;
  std::string new_text;
  bool finished = false;
  FinishReason finish_reason = FinishReason::None;
  std::vector<SampledToken> logprobs;  // all so far, when requested
  // When params.prompt_logprobs >= 0: every prompt position's entry, set
  // once the whole prompt is scored (null before, and for an abort before).
  // Shared and immutable, so every later output carries it without a copy.
  std::shared_ptr<const PromptLogprobs> prompt_logprobs;
  RequestMetrics metrics;
};

class LLMEngine {
 public:
  // Under tensor parallelism this is rank 0's engine (scheduler, tokenizer,
  // sampling); the other ranks call run_worker().
  LLMEngine(const std::string& model_dir, const EngineOptions& options);
  ~LLMEngine();

  // Tensor parallel ranks > 0: load this rank's shard, then run the steps
  // rank 0's engine broadcasts until it shuts down. Throws InputError (or
  // ParallelConfigError) on the same start-up failures as rank 0.
  static void run_worker(const std::string& model_dir, const EngineOptions& options);

  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const ModelConfig& model_config() const { return model_->config(); }
  const CausalLM& model() const { return *model_; }
  int64_t max_model_len() const { return max_model_len_; }
  // Blocks (pages) of all KV pools together, and how many are free.
  int32_t num_kv_blocks() const { return kv_->num_blocks(); }
  int32_t num_free_kv_blocks() const { return kv_->num_free_blocks(); }
  const KVCacheManager& kv_cache() const { return *kv_; }
  size_t kv_cache_bytes() const { return runner_->kv_storage_bytes(); }
  // The KV cache's resolved element type (F32 or BF16).
  DType kv_cache_dtype() const { return runner_->kv_storage_dtype(); }
  // The indexer keys' own format where the model has one ("fp8", "fp4"),
  // else "".
  std::string indexer_cache_label() const { return model_->indexer_cache_label(kv_cache_dtype()); }
  EngineStats stats() const;
  const EngineOptions& options() const { return options_; }
  // Compiles structured-output specs against this model's vocabulary
  // (built on first use); thread-safe.
  structured::GrammarCompiler& grammar_compiler() const;
  // Seconds spent in the model's forward passes so far
  // (ModelRunner::forward_seconds): a step's time less this is the
  // engine's own work, which bench latency reports per decode step.
  double model_seconds() const;
  // Of those, the seconds of a speculative proposer's own model (a draft
  // model's passes; 0 without one).
  double proposer_model_seconds() const;

  // The caches of the speculative proposer (a draft model's layers, the
  // MTP layer) numbered from 0, which the KV plan holds after the target's
  // layers (append_proposer_caches); none without one.
  std::vector<LayerKVCache> proposer_kv_cache_specs() const {
    return proposer_ ? proposer_->kv_cache_specs(kv_cache_dtype()) : std::vector<LayerKVCache>{};
  }
  // The tokens per verify step of k drafts below which the adaptive switch
  // stops a request's speculation (AdaptiveSpeculation::break_even, with
  // this target's verify-step weight bytes and the proposer's cost), for k
  // up to num_speculative_tokens; 0 without speculation.
  double speculation_break_even(int32_t k) const {
    return k >= 0 && k < static_cast<int32_t>(spec_break_even_.size()) ? spec_break_even_[k] : 0;
  }

  // Throws InputError for bad params, an empty or too long prompt or token
  // ids outside the vocabulary. Reads only immutable state: safe to call
  // from any thread.
  void validate_request(const std::vector<int32_t>& prompt_ids, const SamplingParams& params) const;
  // Validates and queues a request; throws InputError as validate_request
  // does, or for a duplicate id.
  void add_request(const std::string& request_id, std::vector<int32_t> prompt_ids,
                   const SamplingParams& params);
  // For benchmarks of decode at a long context (`bench latency
  // --context-len`), which a prefill of that length would take far too
  // long to reach: queues a request whose first `num_computed` prompt
  // positions count as computed. Their blocks come from the KV-cache
  // manager as a prefill in block-sized chunks would take them (a sliding
  // window group ends holding its window only) and are filled with
  // pseudo-random bytes from `seed` (ModelRunner::fill_kv_pages), so the
  // model reads a cache of real size and valid elements. Those pages are no
  // token's K/V, so they must never serve a prefix-cache hit: InputError
  // unless prefix caching is off; also under tensor parallelism (the
  // workers' shards are not filled), for num_computed outside
  // [1, prompt length) (the request must compute a token to sample), a pool
  // too small to hold them, or whatever add_request refuses.
  void add_request_with_context(const std::string& request_id, std::vector<int32_t> prompt_ids,
                                const SamplingParams& params, int64_t num_computed,
                                uint64_t seed);
  // Bytes of the pages an unfinished request holds: over every group, its
  // pages x the pool's page bytes x the group's tensors (what
  // KVCachePlan::bytes_per_sequence predicts); InputError if unknown.
  int64_t kv_bytes_held(const std::string& request_id) const;
  // Finishes a request at once with reason Abort; false if unknown.
  bool abort_request(const std::string& request_id);

  // Runs one step; returns an output for every request that produced a
  // token, finished or was aborted in it. Finished requests are forgotten.
  std::vector<RequestOutput> step();
  bool has_unfinished() const { return scheduler_->has_unfinished(); }
  size_t num_running() const { return scheduler_->num_running(); }
  size_t num_waiting() const { return scheduler_->num_waiting(); }

  // Sees each logits row just before it is sampled (tests and `pagoda logits`);
  // of a request verifying drafts, the row of its last token only.
  using LogitsObserver =
      std::function<void(const std::string& request_id, const float* logits, int64_t vocab_size)>;
  void set_logits_observer(LogitsObserver observer) { logits_observer_ = std::move(observer); }
  // Sees the MTP proposer's logits and drafts (MtpProposer::Observer);
  // InputError unless the engine speculates with method mtp.
  void set_mtp_observer(MtpProposer::Observer observer);
  // Sees each layer's indexer picks (CausalLM::set_index_topk_observer);
  // false for a model without a top-k selection.
  bool set_index_topk_observer(CausalLM::IndexTopkObserver observer) {
    return model_->set_index_topk_observer(std::move(observer));
  }
  // Throws InternalError unless, for every unfinished request: its computed
  // tokens are known tokens (no draft counted), its cached blocks hold only
  // computed tokens and their hashes are those of its tokens (the prefix
  // cache never sees a rejected draft), and it holds no page past its
  // tokens (rejected tails were given back); plus the pools' invariants.
  // For tests, between steps.
  void check_invariants() const;
  // The last step's batch, for tests that check what was scheduled.
  const BatchMetadata& last_batch() const { return runner_->last_batch(); }

 private:
  void init_after_load(const std::string& model_dir, const EngineOptions& options,
                       std::vector<int64_t>* num_blocks, KVCachePlan* plan);
  // Creates the proposer (before the KV plan: its caches join it).
  void init_speculation(const SpeculativeConfig& config);
  void append_token(Request& r, const SampledToken& sampled);
  // Fills the prompt logprob entries whose logits rows this step computed.
  void score_prompt_rows(const SchedulerOutput& sched);
  RequestOutput make_output(Request& r, size_t num_new_tokens);
  // Speculative decoding: hands every request of the step that goes on to
  // the proposer, with the drafts wanted from each that just got a token
  // and decodes on (Request::spec_token_ids).
  void propose_drafts(const SchedulerOutput& sched, const std::vector<Request*>& decoding);
  // How many drafts request r, which just got a token, should verify next.
  int32_t num_drafts_wanted(Request& r);
  // Appends make_output(r, ...) unless r's output_kind holds it back
  // (FinalOnly before the request finishes).
  void emit_output(std::vector<RequestOutput>& outputs, Request& r, size_t num_new_tokens);
  void finish(Request& r, FinishReason reason);

  EngineOptions options_;
  parallel::Communicator& comm_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<CausalLM> model_;
  int64_t max_model_len_ = 0;
  int64_t kv_token_capacity_ = 0;  // EngineStats::kv_token_capacity
  std::vector<int32_t> eos_ids_;
  mutable std::once_flag grammar_compiler_once_;
  mutable std::unique_ptr<structured::GrammarCompiler> grammar_compiler_;
  std::unique_ptr<KVCacheManager> kv_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<ModelRunner> runner_;
  std::unordered_map<std::string, std::unique_ptr<Request>> requests_;
  std::vector<Request*> aborted_;  // reported by the next step()
  LogitsObserver logits_observer_;
  // Per-step scratch, kept to reuse its memory.
  StepLogits step_rows_;
  struct PromptRowTask {
    Request* request;
    size_t entry;
    int32_t row;
  };
  std::vector<PromptRowTask> prompt_row_tasks_;
  std::vector<std::vector<SampledToken>> sampled_;  // [sampling row]: tokens to append
  std::vector<int32_t> num_accepted_;               // [sampling row]: drafts accepted
  std::unique_ptr<Proposer> proposer_;
  MtpProposer* mtp_proposer_ = nullptr;  // proposer_ when the method is mtp
  bool proposer_keeps_kv_ = false;
  std::vector<ProposalRequest> proposals_;  // scratch
  SpecDecodeStats spec_stats_;
  std::vector<double> spec_break_even_;  // [k drafts]: speculation_break_even(k)
};

}  // namespace pagoda
