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
}

}  // namespace pagoda
