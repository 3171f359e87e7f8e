#include "models/output_rows.h"

#include <cstring>

#include "core/error.h"

namespace pagoda {

void output_rows_batch(const BatchMetadata& batch, BatchMetadata& out) {
  const std::vector<int32_t>& rows = batch.logits_indices;
  out.token_ids.clear();
  out.positions.clear();
  out.query_start_loc.assign(1, 0);
  out.seq_lens.clear();
  out.logits_indices.clear();
  out.kv_groups.resize(batch.kv_groups.size());
  for (size_t g = 0; g < batch.kv_groups.size(); ++g) {
    const KVGroupMetadata& from = batch.kv_groups[g];
    KVGroupMetadata& to = out.kv_groups[g];
    to.block_size = from.block_size;
    to.block_tables = from.block_tables;
    to.max_blocks_per_seq = from.max_blocks_per_seq;
    to.slot_mapping.clear();
    to.block_table_rows.clear();
  }
  int32_t seq = 0;  // the sequence of row rows[i] in `batch`
  for (size_t i = 0; i < rows.size(); ++i) {
    const int32_t t = rows[i];
    PAGODA_CHECK(t >= 0 && t < batch.num_tokens() && (i == 0 || t > rows[i - 1]),
                 "output row {} of {} (rows must increase)", t, batch.num_tokens());
    while (batch.query_start_loc[seq + 1] <= t) ++seq;
    out.token_ids.push_back(batch.token_ids[t]);
    out.positions.push_back(batch.positions[t]);
    out.seq_lens.push_back(batch.positions[t] + 1);
    out.query_start_loc.push_back(static_cast<int32_t>(i + 1));
    out.logits_indices.push_back(static_cast<int32_t>(i));
    for (size_t g = 0; g < batch.kv_groups.size(); ++g) {
      const KVGroupMetadata& from = batch.kv_groups[g];
      KVGroupMetadata& to = out.kv_groups[g];
      to.slot_mapping.push_back(from.slot_mapping[t]);
      to.block_table_rows.push_back(from.block_table_rows.empty() ? seq
                                                                  : from.block_table_rows[seq]);
    }
  }
}

void gather_rows(float* data, int64_t width, const std::vector<int32_t>& rows) {
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto t = static_cast<int64_t>(rows[i]);
    if (t != static_cast<int64_t>(i)) {  // t > i: increasing rows never overwrite one to come
      std::memmove(data + static_cast<int64_t>(i) * width, data + t * width,
                   static_cast<size_t>(width) * sizeof(float));
    }
  }
}

}  // namespace pagoda
