// Turns the scheduler's decision into the model's plain BatchMetadata, runs
// the forward pass and hands back one logits row per request that samples.
#pragma once

#include <memory>
#include <vector>

#include "engine/scheduler.h"
#include "kv/kv_cache_manager.h"
#include "kv/kv_storage.h"
#include "models/model.h"

namespace pagoda {

class ModelRunner {
 public:
  ModelRunner(CausalLM& model, const std::vector<KVCacheGroup>& groups, int64_t num_blocks,
              int32_t block_size);

  // Runs one step. For each scheduled request that reaches the end of its
  // known tokens this step, `sampling_rows` gets its index in `out.scheduled`
  // and logits_row(i) holds its logits, in the same order.
  void execute(const SchedulerOutput& out, std::vector<int32_t>* sampling_rows);
  float* logits_row(size_t i) { return logits_.data() + i * vocab_size_; }
  int64_t vocab_size() const { return vocab_size_; }
  // The metadata of the last step (tests replay and inspect it).
  const BatchMetadata& last_batch() const { return batch_; }
  size_t kv_storage_bytes() const { return storage_->bytes(); }

 private:
  CausalLM& model_;
  int32_t block_size_;
  int64_t vocab_size_;
  size_t num_groups_;
  std::unique_ptr<KVStorage> storage_;
  KVCacheView view_;
  BatchMetadata batch_;
  std::vector<float> logits_;
};

}  // namespace pagoda
