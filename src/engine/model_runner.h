// Turns the scheduler's decision into the model's plain BatchMetadata, runs
// the forward pass and hands back one logits row per request that samples.
#pragma once

#include <memory>
#include <vector>

#include "engine/scheduler.h"
#include "kv/kv_cache_manager.h"
#include "kv/kv_cache_memory.h"
#include "models/model.h"
#include "parallel/communicator.h"

namespace pagoda {

class ModelRunner {
 public:
  // `comm` is the tensor-parallel group (size 1: everything local). Every
  // rank builds a runner with a plan of the same groups and the same
  // num_blocks (per pool); each holds the caches of its shard. The caches
  // were declared for kv_dtype elements (CausalLM::kv_cache_specs).
  ModelRunner(CausalLM& model, const KVCachePlan& plan, int64_t num_blocks, DType kv_dtype,
              parallel::Communicator& comm);

  // Runs one step. For each scheduled request that reaches the end of its
  // known tokens this step, `sampling_rows` gets its index in `out.scheduled`
  // and logits_row(i) holds its logits, in the same order. Under tensor
  // parallelism (rank 0 only) the step's batch is broadcast to the workers
  // first.
  void execute(const SchedulerOutput& out, std::vector<int32_t>* sampling_rows);

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
  size_t kv_storage_bytes() const { return kv_memory_.bytes(); }
  void prefault_kv_cache() { kv_memory_.prefault(); }
  DType kv_storage_dtype() const { return kv_memory_.view().dtype; }

 private:
  void broadcast_step(int64_t kind);

  CausalLM& model_;
  parallel::Communicator& comm_;
  bool in_step_ = false;
  bool workers_stopped_ = false;
  std::vector<uint8_t> message_;
  KVCachePlan plan_;
  int64_t vocab_size_;
  KVCacheMemory kv_memory_;
  BatchMetadata batch_;
  std::vector<float> logits_;
};

}  // namespace pagoda
