// POST /tokenize, as vLLM answers it: a text prompt, or a conversation
// rendered exactly as /v1/chat/completions renders it, to token ids.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "server/generation.h"

namespace pagoda::server {

// Returns {"count", "max_model_len", "tokens"} (+ "token_strs", the
// vocabulary strings, with return_token_strs). Throws ApiError.
nlohmann::json tokenize(GenerationContext& ctx, const std::string& body);

}  // namespace pagoda::server
