// The token embedding and the LM head, split along the vocabulary under
// tensor parallelism (vLLM's VocabParallelEmbedding / ParallelLMHead): each
// rank holds rows [begin, begin + count) of both tables. Embedding: a rank
// fills the rows of tokens it holds, zeros the others, and an all-reduce
// assembles every row. Head: each rank computes its slice of the logits and
// rank 0 gathers them into full rows. Shared by every architecture.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/quantize.h"
#include "models/weights.h"
#include "ops/ops.h"
#include "parallel/communicator.h"

namespace pagoda {

struct VocabShard {
  VocabShard(int64_t vocab_size, int rank, int size);
  int64_t vocab_size = 0;
  int rank = 0, size = 1;
  int64_t per_rank = 0, begin = 0, count = 0;  // the last rank may hold fewer
};

class VocabParallelEmbedding {
 public:
  // Slices this rank's rows of `embed_name` [vocab, hidden] and of
  // `head_name` (empty: the head is tied to the embedding).
  VocabParallelEmbedding(WeightStore& weights, parallel::Communicator& comm, int64_t vocab_size,
                         int64_t hidden, const std::string& embed_name,
                         const std::string& head_name);

  // Prepares the head for the kernels (prepare_linear); call once, after
  // the layers' weights (whose conversion should not wait on the head's).
  // A tied head in bf16 (packed or not) holds exactly the embedding's
  // values, so lookups read it and the table is in memory once; an int8
  // head is no longer the embedding, so lookups keep reading the
  // checkpoint, a row at a time (released after each step).
  void prepare(const WeightOptions& options);

  // out[t, :] = embedding of ids[t], on every rank.
  void embed(const int32_t* ids, int64_t tokens, float* out);
  // logits[r, :] = head(x[r, :]) for rows of x [rows, hidden]; rank 0 only
  // (the other ranks pass logits = null and only take part).
  void logits(const float* x, int64_t rows, float* logits);
  // A decoder's output: for each row t of `rows` (the batch's
  // logits_indices), the final hidden state residual[t] + last[t] (the
  // last sublayer's output, not yet added), RMS-normalised with
  // final_norm, through the head. Only those rows go through the norm and
  // the (large) head. selected: scratch of rows.size() x hidden.
  void final_logits(const std::vector<int32_t>& rows, int64_t tokens, const float* residual,
                    const float* last, const float* final_norm, float eps, float* selected,
                    float* logits);

  const ops::Matrix& head() const { return head_; }
  const VocabShard& shard() const { return shard_; }

 private:
  WeightStore& weights_;
  parallel::Communicator& comm_;
  VocabShard shard_;
  int64_t hidden_;
  bool tied_;
  ops::Matrix table_, head_;
  bool rows_in_mapping_ = false;  // see embed()
  std::vector<int64_t> rows_read_;  // embed()'s rows of table_, to release
  std::vector<float> local_logits_, gathered_logits_;  // tensor parallel only
};

}  // namespace pagoda
