// Runs a model directly, without the engine: a prompt's prefill, then one
// decode step, through one KV-cache block; and the error measure used to
// compare two models' logits (int8 against float, sharded against whole).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "models/model.h"

namespace pagoda::test {

// Prefill `prompt` (logits of every position), then decode `next` (one more
// row). Returns the logits rows, flattened; with_logits false is a tensor
// parallel rank other than 0, which takes part but is given no logits.
inline std::vector<float> prefill_and_decode(CausalLM& model, const std::vector<int32_t>& prompt,
                                             int32_t next, bool with_logits = true) {
  constexpr int kBlock = 64;  // the whole sequence fits in block 0
  const auto n = static_cast<int32_t>(prompt.size());
  if (n + 1 > kBlock) throw std::invalid_argument("prefill_and_decode: prompt longer than a block");
  const int64_t vocab = model.config().vocab_size;
  // One block of every group: each group's table is {0}.
  const KVCachePlan plan = plan_kv_cache(model.kv_cache_specs(DType::F32), kBlock);
  KVCacheMemory memory(plan, std::vector<int64_t>(plan.pools.size(), 1), DType::F32);
  const KVCacheView& view = memory.view();
  BatchMetadata b;
  b.token_ids = prompt;
  for (int32_t i = 0; i < n; ++i) b.positions.push_back(i);
  b.query_start_loc = {0, n};
  b.seq_lens = {n};
  b.kv_groups.resize(plan.groups.size());
  for (KVGroupMetadata& g : b.kv_groups) {
    g.block_size = kBlock;
    g.slot_mapping.assign(b.positions.begin(), b.positions.end());
    g.block_tables = {0};
    g.max_blocks_per_seq = 1;
  }
  for (int32_t i = 0; i < n; ++i) b.logits_indices.push_back(i);
  std::vector<float> logits(static_cast<size_t>((n + 1) * vocab));
  model.forward(b, view, with_logits ? logits.data() : nullptr);

  BatchMetadata d = b;
  d.token_ids = {next};
  d.positions = {n};
  d.query_start_loc = {0, 1};
  d.seq_lens = {n + 1};
  for (KVGroupMetadata& g : d.kv_groups) g.slot_mapping = {n};
  d.logits_indices = {0};
  model.forward(d, view, with_logits ? logits.data() + n * vocab : nullptr);
  return logits;
}

// Worst over rows of max |got - want| / max |want| (rows of `vocab`).
inline double worst_relative_error(const std::vector<float>& got, const std::vector<float>& want,
                                   int64_t vocab) {
  double worst = 0;
  for (size_t row = 0; row * vocab < want.size(); ++row) {
    double max_ref = 0, max_err = 0;
    for (int64_t j = 0; j < vocab; ++j) {
      max_ref = std::max(max_ref, double{std::fabs(want[row * vocab + j])});
      max_err = std::max(max_err, double{std::fabs(got[row * vocab + j] - want[row * vocab + j])});
    }
    worst = std::max(worst, max_err / max_ref);
  }
  return worst;
}

// Two loadings of one checkpoint (say exact and int8, or repacked and in
// place) over the same prompt and 33 decode steps: the worst relative error
// of got's logits against want's.
inline double worst_logit_error(CausalLM& want, CausalLM& got) {
  const std::vector<int32_t> prompt = {1, 45, 300, 17, 88, 102, 7, 256, 3, 99, 140, 12};
  return worst_relative_error(prefill_and_decode(got, prompt, 33),
                              prefill_and_decode(want, prompt, 33), want.config().vocab_size);
}

}  // namespace pagoda::test
