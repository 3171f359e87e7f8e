// OpenAI / vLLM request bodies for /v1/completions and /v1/chat/completions,
// parsed and validated into plain structs. Every problem becomes an
// ApiError (400) naming the field.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/sampling_params.h"

namespace pagoda::server {

struct GenerationRequest {
  std::string model;  // "" when omitted
  bool chat = false;
  // Completions: one or more prompts, as text or token ids.
  std::vector<std::string> text_prompts;
  std::vector<std::vector<int32_t>> id_prompts;
  // Chat: the conversation and template inputs.
  nlohmann::ordered_json messages;
  nlohmann::ordered_json tools;
  bool add_generation_prompt = true;
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();
  std::optional<int> max_tokens;  // unset: fill the context (chat) / 16 (completions)
  int n = 1;
  bool stream = false;
  bool include_usage = false;
  bool echo = false;
  int top_logprobs = -1;    // -1: no logprobs requested
  SamplingParams sampling;  // max_tokens filled in later
};

// Throws ApiError.
GenerationRequest parse_completion_request(const std::string& body);
GenerationRequest parse_chat_request(const std::string& body);

// Parses a JSON body into an object, or throws ApiError (400).
nlohmann::ordered_json parse_json_object(const std::string& body);

}  // namespace pagoda::server
