// Turns the scheduler's decision into the model's plain BatchMetadata, runs
// the forward pass and hands back one logits row per request that samples.
#pragma once

#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/scheduler.h"
#include "kv/kv_cache_manager.h"
#include "kv/kv_cache_memory.h"
#include "models/model.h"
#include "parallel/communicator.h"

namespace pagoda {

// What each logits row of a step is for. Rows of one request are
// consecutive: its prompt-scoring rows, then its sampling row.
struct StepLogits {
  // Requests that sample (index in SchedulerOutput::scheduled) and their row.
  // A request verifying k draft tokens (ScheduledRequest::num_spec_tokens)
  // has k + 1 consecutive rows from its sampling row on: the positions of
  // its last token and of each draft, each predicting the token after it.
  std::vector<int32_t> sampling_requests, sampling_rows;
  // Rows that score prompt positions (prompt_logprobs): `count` consecutive
  // positions of one request, filling its entries from `first_entry` on
  // (entry i comes from position i), in rows [first_row, first_row + count).
  struct PromptRows {
    int32_t request = 0;
    int32_t first_row = 0;
    int64_t first_entry = 0;
    int64_t count = 0;
  };
  std::vector<PromptRows> prompt_rows;
  void clear() {
    sampling_requests.clear();
    sampling_rows.clear();
    prompt_rows.clear();
  }
};

// Appends positions [start, end) of a sequence whose pages are
// `block_tables` (one per group of `groups`) to `b`: the positions, each
// group's slots and the sequence's bounds (query_start_loc, seq_lens); its
// token ids are the caller's. The target's steps (ModelRunner) and the MTP
// proposer's passes build their batches with it.
void append_sequence(BatchMetadata& b, const std::vector<KVCacheGroup>& groups,
                     const std::vector<std::vector<int32_t>>& block_tables, int64_t start,
                     int64_t end);

// A sequence of a proposer model's pass (spec_decode/draft_model_proposer.h):
// positions [start, end) of the request's token_at() (its tokens, then its
// drafts), with a logits row at end - 1 where `logits`.
struct ProposerSequence {
  const Request* request = nullptr;
  int64_t start = 0, end = 0;
  bool logits = false;
};

class ModelRunner {
 public:
  // `comm` is the tensor-parallel group (size 1: everything local). Every
  // rank builds a runner with a plan of the same groups and the same
  // num_blocks per pool; each holds the caches of its shard. The caches
  // were declared for kv_dtype elements (CausalLM::kv_cache_specs).
  ModelRunner(CausalLM& model, const KVCachePlan& plan, const std::vector<int64_t>& num_blocks,
              DType kv_dtype, parallel::Communicator& comm);
  // A runner for a second model whose caches are the plan's layers from
  // first_layer on, in another runner's memory (a speculative proposer's
  // draft model: same pools, same block tables).
  ModelRunner(CausalLM& model, const KVCachePlan& plan, KVCacheMemory& memory, int32_t first_layer,
              parallel::Communicator& comm);

  // Runs one step. Each scheduled request that reaches the end of its known
  // tokens this step gets a sampling row; one that still scores its prompt
  // (Request::scoring_prompt) also gets a row for every prompt position it
  // computes whose entry is not filled yet (so a recompute after preemption
  // adds none twice), and only those requests pay the LM head for more than
  // one row. A request with drafts gets a row for its last token's position
  // and one per draft (StepLogits). `rows` says which logits_row(i) is which. Under tensor
  // parallelism (rank 0 only) the step's batch is broadcast to the workers
  // first.
  void execute(const SchedulerOutput& out, StepLogits* rows);
  // A proposer model's pass (the runner of the second constructor, one
  // rank): logits_row(i) is the i-th sequence with `logits`.
  void execute(std::span<const ProposerSequence> seqs);
  // Seconds spent in the model's forward passes by execute() so far: a
  // step's time less this is the engine's own bookkeeping (batch building,
  // scheduling, sampling, outputs), which bench latency reports.
  double forward_seconds() const { return forward_seconds_; }

  // Tensor parallel ranks > 0: run the steps rank 0 broadcasts until it
  // sends shutdown. Returns the number of steps run.
  int64_t serve_worker();
  // Rank 0: tells the workers to leave serve_worker() (no-op at size 1,
  // once only, and skipped when a step was interrupted by an exception,
  // since the workers are then inside a collective: the job is aborted).
  void shutdown_workers();
  float* logits_row(size_t i) { return logits_.data() + i * vocab_size_; }
  int64_t vocab_size() const { return vocab_size_; }
  // The metadata of the last step (tests replay and inspect it).
  const BatchMetadata& last_batch() const { return batch_; }
  size_t kv_storage_bytes() const { return memory_->bytes(); }
  void prefault_kv_cache() { memory_->prefault(); }
  KVCacheMemory& kv_memory() { return *memory_; }
  // Layers of this runner's model (its caches are the plan's layers
  // [first_layer, first_layer + num_layers)).
  int32_t num_layers() const { return static_cast<int32_t>(view_.layers.size()); }
  // Fills the pages the request holds with pseudo-random bytes
  // (KVCacheMemory::fill_pages): benchmarks of a context never computed.
  void fill_kv_pages(const KVRequestState& state, uint64_t seed) {
    memory_->fill_pages(plan_, state.block_tables, seed);
  }
  DType kv_storage_dtype() const { return view_.dtype; }

 private:
  void broadcast_step(int64_t kind);
  // Keeps batch_.kv_groups' block tables persistent: each scheduled
  // request keeps its row while it runs, and a step copies only the pages
  // it gained since (vLLM's persistent block table); each group's rows
  // count its own pages (KVGroupMetadata::block_size).
  void update_block_tables(std::span<const KVRequestState* const> seqs);
  // Appends positions [start, end) of `r` to the batch (tokens, positions,
  // slots, the sequence's bounds).
  void add_sequence(const Request& r, int64_t start, int64_t end);
  void begin_batch();
  void forward();
  std::vector<const KVRequestState*> seq_kv_;  // scratch

  CausalLM& model_;
  parallel::Communicator& comm_;
  bool in_step_ = false;
  bool workers_stopped_ = false;
  std::vector<uint8_t> message_;
  KVCachePlan plan_;
  int64_t vocab_size_;
  std::unique_ptr<KVCacheMemory> owned_memory_;  // null when another runner's
  KVCacheMemory* memory_ = nullptr;
  KVCacheView view_;  // this model's layers of memory_
  struct TableRow {
    const KVRequestState* owner = nullptr;  // null: a free row
    uint64_t generation = 0;                // the owner's admission it copied
    std::vector<size_t> copied;             // [group] blocks copied so far
  };
  std::vector<TableRow> table_rows_;
  std::unordered_map<const KVRequestState*, int32_t> row_index_;
  BatchMetadata batch_;
  std::vector<float> logits_;
  double forward_seconds_ = 0;
};

}  // namespace pagoda
