// DeepSeek V4's KV compressor (spec §3.2.3, §4.3): every r token positions
// become one compressed entry, a per-dimension softmax-gated pooling of the
// tokens' projections (with a learned position bias `ape`), RMS-normalised
// and rotated (RoPE) at the entry's first position. Ratio 4 (c4a) pools
// overlapping windows: the previous window's tokens through the first
// half of the projection columns, the own window's through the second.
//
// The rolling state of the official decoder (the last c*r tokens' value
// and logit rows) is a sliding-window KV cache here ("compressor_state",
// models/deepseek_v4_config.h): each step writes its tokens' rows into it
// first, then pools every entry one of its tokens completes from the rows
// of the entry's window, wherever they were computed (this step, an earlier
// chunk, or a prefix-cache hit). So chunked prefill split anywhere,
// prefix-cache resumption and recompute after preemption give the entries
// of a single full pass, with no special path.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/model.h"
#include "models/quantize.h"
#include "models/weights.h"
#include "ops/ops.h"

namespace pagoda {

// Rows of a paged cache addressed by token position: page table[pos /
// positions_per_page], row pos % positions_per_page, pages page_bytes apart.
struct PagedRows {
  uint8_t* data = nullptr;
  int64_t page_bytes = 0;
  int32_t positions_per_page = 0;
  int64_t row_bytes = 0;

  uint8_t* at_slot(int64_t slot) const {
    return data + slot / positions_per_page * page_bytes + slot % positions_per_page * row_bytes;
  }
  uint8_t* at(const int32_t* table, int64_t pos) const {
    return at_slot(int64_t{table[pos / positions_per_page]} * positions_per_page +
                   pos % positions_per_page);
  }
};

class Compressor {
 public:
  // prefix: e.g. "layers.3.attn.compressor." (ape, wkv, wgate, norm);
  // entries of `dim` values whose last rope_dim are rotated with inv_freq
  // (interleaved pairs); rotate: a Hadamard rotation last (the indexer's).
  Compressor(WeightStore& weights, const std::string& prefix, int64_t hidden, int64_t ratio,
             int64_t dim, int64_t rope_dim, const std::vector<float>* inv_freq, float eps,
             bool rotate, const WeightOptions& options);

  int64_t ratio() const { return ratio_; }
  // Bytes of one state row (value half then logit half, f32).
  int64_t state_row_bytes() const { return 2 * width_ * 4; }

  // For the step's tokens (a: the attention input [tokens, hidden]):
  // stores their state rows at state_group's slots, then computes the
  // entries their positions complete. Fills entries [n, dim] and
  // entry_rows (the token row completing each); returns n.
  int64_t run(const float* a, const BatchMetadata& batch, const KVGroupMetadata& state_group,
              const PagedRows& state, int64_t tokens, std::vector<float>& entries,
              std::vector<int32_t>& entry_rows);

 private:
  int64_t ratio_, dim_, width_, rope_dim_;  // width: c * dim projection columns
  bool overlap_, rotate_;
  float eps_;
  const std::vector<float>* inv_freq_;
  ops::Matrix wkv_, wgate_;
  std::vector<float> ape_;        // [ratio, width]
  const float* norm_ = nullptr;  // [dim]
  std::vector<float> kv_, gate_;
  std::vector<int32_t> anchors_;
};

}  // namespace pagoda
