#include "engine/sampling_params.h"

#include <cmath>

#include "core/error.h"

namespace pagoda {

void SamplingParams::validate() const {
  if (!std::isfinite(temperature) || temperature < 0) {
    throw_input_error("temperature must be a finite number >= 0, got {}", temperature);
  }
  if (!(top_p > 0 && top_p <= 1)) throw_input_error("top_p must be in (0, 1], got {}", top_p);
  if (top_k < -1) throw_input_error("top_k must be -1, 0 (off) or positive, got {}", top_k);
  if (!(min_p >= 0 && min_p <= 1)) throw_input_error("min_p must be in [0, 1], got {}", min_p);
  if (!(repetition_penalty > 0) || !std::isfinite(repetition_penalty)) {
    throw_input_error("repetition_penalty must be > 0, got {}", repetition_penalty);
  }
  if (!(presence_penalty >= -2 && presence_penalty <= 2)) {
    throw_input_error("presence_penalty must be in [-2, 2], got {}", presence_penalty);
  }
  if (!(frequency_penalty >= -2 && frequency_penalty <= 2)) {
    throw_input_error("frequency_penalty must be in [-2, 2], got {}", frequency_penalty);
  }
  if (max_tokens < 1) throw_input_error("max_tokens must be >= 1, got {}", max_tokens);
  if (min_tokens < 0 || min_tokens > max_tokens) {
    throw_input_error("min_tokens must be in [0, max_tokens={}], got {}", max_tokens, min_tokens);
  }
  if (logprobs < -1 || logprobs > 20)
    throw_input_error("logprobs must be in [0, 20], got {}", logprobs);
  if (prompt_logprobs < -1 || prompt_logprobs > 20)
    throw_input_error("prompt_logprobs must be in [0, 20], got {}", prompt_logprobs);
  for (const std::string& s : stop) {
    if (s.empty()) throw_input_error("stop strings must not be empty");
  }
  for (const auto& [id, bias] : logit_bias) {
    if (!(bias >= -100 && bias <= 100))
      throw_input_error("logit_bias values must be in [-100, 100], got {} for token {}", bias, id);
  }
  for (const auto& word : bad_words_token_ids) {
    if (word.empty()) throw_input_error("bad_words must not hold an empty word");
  }
}

void SamplingParams::validate_token_ids(int64_t vocab_size) const {
  auto check = [&](int32_t id, const char* field) {
    if (id < 0 || id >= vocab_size)
      throw_input_error("{} holds token id {}, outside the vocabulary [0, {})", field, id,
                        vocab_size);
  };
  for (const auto& entry : logit_bias) check(entry.first, "logit_bias");
  for (int32_t id : allowed_token_ids) check(id, "allowed_token_ids");
  for (const auto& word : bad_words_token_ids)
    for (int32_t id : word) check(id, "bad_words");
}

}  // namespace pagoda
