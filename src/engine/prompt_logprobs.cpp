#include "engine/prompt_logprobs.h"

#include "core/error.h"

namespace pagoda {

PromptLogprobs::PromptLogprobs(int top_n, size_t prompt_len)
    : top_n_(top_n), num_positions_(prompt_len > 0 ? prompt_len - 1 : 0) {
  PAGODA_CHECK(top_n >= 0, "prompt logprobs top_n {}", top_n);
  // Reserved once, so filling never reallocates.
  tokens_.reserve(num_positions_);
  ranks_.reserve(num_positions_);
  logprobs_.reserve(num_positions_);
  top_ids_.reserve(num_positions_ * top_n_);
  top_logprobs_.reserve(num_positions_ * top_n_);
}

size_t PromptLogprobs::extend(size_t count) {
  const size_t first = size();
  PAGODA_CHECK(first + count <= num_positions_, "prompt logprobs: {} + {} entries of {}", first,
               count, num_positions_);
  tokens_.resize(first + count);
  ranks_.resize(first + count);
  logprobs_.resize(first + count);
  top_ids_.resize((first + count) * top_n_);
  top_logprobs_.resize((first + count) * top_n_);
  return first;
}

PromptLogprobs::Slot PromptLogprobs::slot(size_t i) {
  return {tokens_.data() + i, logprobs_.data() + i, ranks_.data() + i, top_ids_.data() + i * top_n_,
          top_logprobs_.data() + i * top_n_};
}

}  // namespace pagoda
