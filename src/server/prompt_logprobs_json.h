// vLLM's JSON form of prompt_logprobs, shared by the server's responses and
// `pagoda generate --json`: a list over prompt positions, null for the
// first, then {"<token id>": {"logprob", "rank", "decoded_token"}} holding
// the actual prompt token and the top N.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>

#include "engine/prompt_logprobs.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::server {

// `lp` must be complete. A top id equal to the prompt token keeps the
// rank of its place in the top N (vLLM builds the dict with the top N
// written after the prompt token, so they overwrite it; the two ranks
// differ only under tied logits). -inf logprobs become -9999.0, as vLLM
// clamps them (JSON has no infinity).
nlohmann::json prompt_logprobs_json(const PromptLogprobs& lp, const Tokenizer& tok);

}  // namespace pagoda::server
