#include "engine/model_runner.h"

#include <algorithm>

namespace pagoda {

ModelRunner::ModelRunner(CausalLM& model, const std::vector<KVCacheGroup>& groups,
                         int64_t num_blocks, int32_t block_size)
    : model_(model),
      block_size_(block_size),
      vocab_size_(model.config().vocab_size),
      num_groups_(groups.size()) {
  const KVCacheSpec spec = model.kv_cache_spec();
  // Layer j of every group lives in storage slot j (see kv_cache_manager.h).
  size_t slots = 0;
  for (const KVCacheGroup& g : groups) slots = std::max(slots, g.layers.size());
  storage_ = std::make_unique<KVStorage>(static_cast<int64_t>(slots), num_blocks,
                                         block_size * spec.num_kv_heads * spec.head_dim);
  view_.layout = {block_size, static_cast<int>(spec.num_kv_heads), static_cast<int>(spec.head_dim)};
  view_.k.resize(spec.num_layers);
  view_.v.resize(spec.num_layers);
  view_.layer_group.resize(spec.num_layers);
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t j = 0; j < groups[g].layers.size(); ++j) {
      const int32_t layer = groups[g].layers[j];
      view_.k[layer] = storage_->k(static_cast<int64_t>(j));
      view_.v[layer] = storage_->v(static_cast<int64_t>(j));
      view_.layer_group[layer] = static_cast<int32_t>(g);
    }
  }
  batch_.kv_groups.resize(groups.size());
}

void ModelRunner::execute(const SchedulerOutput& out, std::vector<int32_t>* sampling_rows) {
  BatchMetadata& b = batch_;
  b.token_ids.clear();
  b.positions.clear();
  b.query_start_loc.assign(1, 0);
  b.seq_lens.clear();
  b.logits_indices.clear();
  sampling_rows->clear();

  for (size_t g = 0; g < num_groups_; ++g) {
    KVGroupMetadata& gm = b.kv_groups[g];
    gm.slot_mapping.clear();
    gm.block_tables.clear();
    gm.max_blocks_per_seq = 0;
    for (const ScheduledRequest& s : out.scheduled) {
      gm.max_blocks_per_seq = std::max(gm.max_blocks_per_seq,
                                       static_cast<int32_t>(s.request->kv.block_tables[g].size()));
    }
  }
  for (size_t i = 0; i < out.scheduled.size(); ++i) {
    const Request& r = *out.scheduled[i].request;
    const int64_t start = r.num_computed_tokens, end = start + out.scheduled[i].num_new_tokens;
    for (int64_t pos = start; pos < end; ++pos) {
      b.token_ids.push_back(r.token_at(pos));
      b.positions.push_back(static_cast<int32_t>(pos));
    }
    for (size_t g = 0; g < num_groups_; ++g) {
      KVGroupMetadata& gm = b.kv_groups[g];
      const std::vector<int32_t>& table = r.kv.block_tables[g];
      for (int64_t pos = start; pos < end; ++pos) {
        gm.slot_mapping.push_back(static_cast<int64_t>(table[pos / block_size_]) * block_size_ +
                                  pos % block_size_);
      }
      // Released (-1) entries of sliding-window groups are never read; 0 keeps them in range.
      for (int32_t block : table) gm.block_tables.push_back(std::max(block, 0));
      gm.block_tables.resize(gm.block_tables.size() + gm.max_blocks_per_seq - table.size(), 0);
    }
    b.query_start_loc.push_back(static_cast<int32_t>(b.token_ids.size()));
    b.seq_lens.push_back(static_cast<int32_t>(end));
    if (end == r.num_tokens()) {  // prompt (or recompute) done: this row samples
      b.logits_indices.push_back(static_cast<int32_t>(b.token_ids.size() - 1));
      sampling_rows->push_back(static_cast<int32_t>(i));
    }
  }
  logits_.resize(b.logits_indices.size() * vocab_size_);
  model_.forward(b, view_, logits_.data());
}

}  // namespace pagoda
