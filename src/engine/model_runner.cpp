#include "engine/model_runner.h"

#include <algorithm>

namespace pagoda {

ModelRunner::ModelRunner(CausalLM& model, int64_t num_blocks, int32_t block_size)
    : model_(model),
      block_size_(block_size),
      vocab_size_(model.config().vocab_size),
      storage_(model.kv_cache_spec().num_layers, num_blocks,
               block_size * model.kv_cache_spec().num_kv_heads * model.kv_cache_spec().head_dim) {
  const KVCacheSpec spec = model.kv_cache_spec();
  view_.layout = {block_size, static_cast<int>(spec.num_kv_heads), static_cast<int>(spec.head_dim)};
  for (int64_t l = 0; l < spec.num_layers; ++l) {
    view_.k.push_back(storage_.k(l));
    view_.v.push_back(storage_.v(l));
  }
}

void ModelRunner::execute(const SchedulerOutput& out, std::vector<int32_t>* sampling_rows) {
  BatchMetadata& b = batch_;
  b.token_ids.clear();
  b.positions.clear();
  b.slot_mapping.clear();
  b.query_start_loc.assign(1, 0);
  b.seq_lens.clear();
  b.block_tables.clear();
  b.logits_indices.clear();
  sampling_rows->clear();

  b.max_blocks_per_seq = 0;
  for (const ScheduledRequest& s : out.scheduled) {
    b.max_blocks_per_seq =
        std::max(b.max_blocks_per_seq, static_cast<int32_t>(s.request->block_table.size()));
  }
  for (size_t i = 0; i < out.scheduled.size(); ++i) {
    const Request& r = *out.scheduled[i].request;
    const int64_t start = r.num_computed_tokens, end = start + out.scheduled[i].num_new_tokens;
    for (int64_t pos = start; pos < end; ++pos) {
      b.token_ids.push_back(r.token_at(pos));
      b.positions.push_back(static_cast<int32_t>(pos));
      b.slot_mapping.push_back(
          static_cast<int64_t>(r.block_table[pos / block_size_]) * block_size_ + pos % block_size_);
    }
    b.query_start_loc.push_back(static_cast<int32_t>(b.token_ids.size()));
    b.seq_lens.push_back(static_cast<int32_t>(end));
    b.block_tables.insert(b.block_tables.end(), r.block_table.begin(), r.block_table.end());
    b.block_tables.resize(b.block_tables.size() + b.max_blocks_per_seq - r.block_table.size(), 0);
    if (end == r.num_tokens()) {  // prompt (or recompute) done: this row samples
      b.logits_indices.push_back(static_cast<int32_t>(b.token_ids.size() - 1));
      sampling_rows->push_back(static_cast<int32_t>(i));
    }
  }
  logits_.resize(b.logits_indices.size() * vocab_size_);
  model_.forward(b, view_, logits_.data());
}

}  // namespace pagoda
