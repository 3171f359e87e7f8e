// One request's prompt logprobs (vLLM's `prompt_logprobs`): for every
// prompt position k >= 1, the logprob and rank of prompt token k under the
// model's raw distribution after tokens [0, k), and the top N ids there.
// Position 0 has no entry (vLLM's leading null): nothing predicts it.
//
// Entry i (0-based) belongs to prompt token i + 1 and comes from the logits
// row at position i. The engine fills entries in position order as the
// prefill computes them (chunk by chunk); a recompute after preemption
// skips the ones already filled, so each is written once. Once complete
// (prompt length - 1 entries) it is never changed again, which is what lets
// outputs share it with other threads without copying.
//
// Stored as flat arrays with N top slots per entry: a long prompt costs no
// allocation per position.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace pagoda {

class PromptLogprobs {
 public:
  // `top_n` alternatives per entry; space for a prompt of prompt_len tokens.
  PromptLogprobs(int top_n, size_t prompt_len);

  int top_n() const { return top_n_; }
  // Entries filled so far: prompt tokens 1..size() are scored.
  size_t size() const { return tokens_.size(); }
  // prompt_len - 1 entries: every position that has one.
  size_t num_positions() const { return num_positions_; }
  bool complete() const { return size() == num_positions_; }

  int32_t token(size_t i) const { return tokens_[i]; }
  float logprob(size_t i) const { return logprobs_[i]; }
  // 1-based: how many vocabulary ids have a logit >= the token's (vLLM's
  // count, so ties rank the token after its equals).
  int32_t rank(size_t i) const { return ranks_[i]; }
  // The top N ids (best first, ties by lower id) and their logprobs.
  std::span<const int32_t> top_ids(size_t i) const {
    return {top_ids_.data() + i * top_n_, static_cast<size_t>(top_n_)};
  }
  std::span<const float> top_logprobs(size_t i) const {
    return {top_logprobs_.data() + i * top_n_, static_cast<size_t>(top_n_)};
  }

  // Where one entry's values go; filled by compute_prompt_logprob (sampler.h).
  struct Slot {
    int32_t* token;
    float* logprob;
    int32_t* rank;
    int32_t* top_ids;
    float* top_logprobs;
  };
  // Appends `count` entries for the next positions (left for the caller to
  // fill, rows in parallel) and returns the index of the first.
  size_t extend(size_t count);
  Slot slot(size_t i);

 private:
  int top_n_;
  size_t num_positions_;
  std::vector<int32_t> tokens_, ranks_, top_ids_;
  std::vector<float> logprobs_, top_logprobs_;
};

}  // namespace pagoda
