// OpenAI / vLLM request bodies for /v1/completions, /v1/chat/completions and
// /tokenize, parsed and validated into plain structs. Every problem becomes an
// ApiError (400) naming the field.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/sampling_params.h"
#include "structured/output_spec.h"

namespace pagoda::server {

// What turns a conversation into prompt ids: the same fields, defaults and
// rendering serve /v1/chat/completions and /tokenize, so a client counting
// a chat's tokens gets the prompt the chat request would run. Defaults are
// vLLM's (ChatCompletionRequest / TokenizeChatRequest).
struct ChatPrompt {
  nlohmann::ordered_json messages;
  nlohmann::ordered_json tools;
  bool add_generation_prompt = true;
  // Leave the last message open (no end-of-turn) so the model continues it.
  bool continue_final_message = false;
  // Tokenizer specials (BOS) on top of what the template writes itself.
  bool add_special_tokens = false;
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();
};

struct GenerationRequest {
  std::string model;  // "" when omitted
  bool chat = false;
  // Completions: one or more prompts, as text or token ids.
  std::vector<std::string> text_prompts;
  std::vector<std::vector<int32_t>> id_prompts;
  bool add_special_tokens = true;  // completions' text prompts (vLLM's default)
  // Chat: the conversation and template inputs.
  ChatPrompt chat_prompt;
  std::optional<int> max_tokens;  // unset: fill the context (chat) / 16 (completions)
  int n = 1;
  bool stream = false;
  bool include_usage = false;
  bool echo = false;
  int top_logprobs = -1;  // -1: no logprobs requested
  // vLLM extensions: the prompt's and each choice's token ids in the
  // response, and prompt_logprobs (top N per prompt position; -1: none).
  bool return_token_ids = false;
  int prompt_logprobs = -1;
  // vLLM's bad_words, tokenized into sampling.bad_words_token_ids at
  // submission (the tokenizer lives with the engine).
  std::vector<std::string> bad_words;
  // Chat: "none", "auto", "required", "function" (a named function:
  // tool_choice_function) or "" (not given; "auto" when tools are given,
  // as vLLM). "required" and "function" are enforced by constraining the
  // output to the tool-call format (server/tool_choice_grammar.h).
  std::string tool_choice;
  std::string tool_choice_function;
  // Structured outputs (response_format, structured_outputs, guided_*),
  // compiled at submission; structured_field names the field it came from.
  structured::OutputSpec structured_output;
  std::string structured_field;
  SamplingParams sampling;  // max_tokens filled in later
};

// POST /tokenize (vLLM's TokenizeCompletionRequest | TokenizeChatRequest):
// either a text prompt or a conversation.
struct TokenizeRequest {
  std::string model;  // "" when omitted
  bool chat = false;
  std::string prompt;              // !chat
  ChatPrompt chat_prompt;          // chat; its add_special_tokens is the one used
  bool add_special_tokens = true;  // !chat
  bool return_token_strs = false;
};

// Throws ApiError.
TokenizeRequest parse_tokenize_request(const std::string& body);
GenerationRequest parse_completion_request(const std::string& body);
GenerationRequest parse_chat_request(const std::string& body);

// Reads the chat-prompt fields (messages, tools, add_generation_prompt,
// continue_final_message, add_special_tokens, chat_template_kwargs) of a
// parsed body; throws ApiError.
ChatPrompt parse_chat_prompt(const nlohmann::ordered_json& body);

// Parses a JSON body into an object, or throws ApiError (400). A number too
// large for a double is a 400 naming the field it was given for.
nlohmann::ordered_json parse_json_object(const std::string& body);

}  // namespace pagoda::server
