#include "models/vocab_parallel.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "models/linear_weights.h"

namespace pagoda {

VocabShard::VocabShard(int64_t vocab, int rank_, int size_)
    : vocab_size(vocab), rank(rank_), size(size_) {
  per_rank = (vocab + size - 1) / size;
  begin = std::min<int64_t>(vocab, rank * per_rank);
  count = std::min<int64_t>(vocab, begin + per_rank) - begin;
}

VocabParallelEmbedding::VocabParallelEmbedding(WeightStore& weights, parallel::Communicator& comm,
                                               int64_t vocab_size, int64_t hidden,
                                               const std::string& embed_name,
                                               const std::string& head_name)
    : weights_(weights),
      comm_(comm),
      shard_(vocab_size, comm.rank(), comm.size()),
      hidden_(hidden),
      tied_(head_name.empty()) {
  table_ = weights_.row_slice(embed_name, vocab_size, hidden, shard_.begin, shard_.count);
  head_ = tied_ ? table_
                : weights_.row_slice(head_name, vocab_size, hidden, shard_.begin, shard_.count);
}

void VocabParallelEmbedding::prepare(const WeightOptions& options) {
  if (tied_ && options.quantization != Quantization::Int8) {
    head_ = prepare_linear(weights_, head_, options, false);
    table_ = head_;
  } else {
    head_ = prepare_linear(weights_, head_, options, tied_);
  }
  // A table of its own read in place: lookups fault single rows in, and
  // embed() unmaps them again.
  rows_in_mapping_ = table_.data != head_.data && weights_.in_mapping(table_);
  if (rows_in_mapping_) weights_.advise_random_rows(table_);
}

void VocabParallelEmbedding::embed(const int32_t* ids, int64_t tokens, float* out) {
  if (shard_.size == 1) {
    ops::embedding(ids, tokens, table_, out);
  } else {
    for (int64_t t = 0; t < tokens; ++t) {
      const auto local = static_cast<int32_t>(ids[t] - shard_.begin);
      float* row = out + t * hidden_;
      if (local >= 0 && local < shard_.count) {
        ops::embedding(&local, 1, table_, row);
      } else {
        std::memset(row, 0, static_cast<size_t>(hidden_) * sizeof(float));
      }
    }
  }
  // The rows just read do not stay resident (release_rows).
  if (rows_in_mapping_) {
    rows_read_.clear();
    for (int64_t t = 0; t < tokens; ++t) {
      const int64_t local = ids[t] - shard_.begin;
      if (local >= 0 && local < shard_.count) rows_read_.push_back(local);
    }
    weights_.release_rows(table_, rows_read_);
  }
  if (shard_.size > 1) comm_.all_reduce_sum(out, tokens * hidden_);
}

void VocabParallelEmbedding::logits(const float* x, int64_t rows, float* logits) {
  if (shard_.size == 1) {
    ops::linear(x, rows, head_, nullptr, logits);
    return;
  }
  if (rows == 0) return;
  const int64_t vpr = shard_.per_rank, vocab = shard_.vocab_size;
  if (static_cast<int64_t>(local_logits_.size()) < rows * vpr) {
    local_logits_.resize(rows * vpr);
    gathered_logits_.resize(shard_.size * rows * vpr);
  }
  float* local = local_logits_.data();
  ops::linear(x, rows, head_, nullptr, local);
  // The last rank's slice may be short: spread its rows to the common
  // stride vpr (backwards, so no row is overwritten before it moves).
  if (shard_.count < vpr) {
    for (int64_t r = rows - 1; r > 0; --r) {
      std::memmove(local + r * vpr, local + r * shard_.count,
                   static_cast<size_t>(shard_.count) * sizeof(float));
    }
  }
  comm_.gather(local, rows * vpr, gathered_logits_.data(), 0);
  if (shard_.rank != 0) return;
  for (int64_t p = 0; p < shard_.size; ++p) {
    const int64_t begin = std::min(vocab, p * vpr), count = std::min(vocab, begin + vpr) - begin;
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(logits + r * vocab + begin, gathered_logits_.data() + (p * rows + r) * vpr,
                  static_cast<size_t>(count) * sizeof(float));
    }
  }
}

void VocabParallelEmbedding::final_logits(const std::vector<int32_t>& rows, int64_t tokens,
                                          const float* residual, const float* last,
                                          const float* final_norm, float eps, float* selected,
                                          float* logits) {
  const auto n = static_cast<int64_t>(rows.size());
  for (int64_t r = 0; r < n; ++r) {
    const int64_t t = rows[r];
    PAGODA_CHECK(t >= 0 && t < tokens, "logits index {}", t);
    for (int64_t j = 0; j < hidden_; ++j) {
      selected[r * hidden_ + j] = residual[t * hidden_ + j] + last[t * hidden_ + j];
    }
  }
  ops::rms_norm(selected, final_norm, n, hidden_, eps, selected);
  this->logits(selected, n, logits);
}

}  // namespace pagoda
