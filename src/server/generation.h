// Runs one /v1/completions or /v1/chat/completions request on the engine:
// prompt preparation (tokenizer, chat template), submission of every choice,
// and the response, whole or as server-sent events.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/async_engine.h"
#include "server/metrics.h"
#include "server/chat_output_parser.h"
#include "server/protocol.h"

namespace pagoda::server {

struct GenerationContext {
  AsyncEngine& engine;
  Metrics& metrics;
  std::string model_name;
  std::string chat_template;  // "" when the model has none
  // --reasoning-parser; nullopt = off.
  std::optional<ReasoningFormat> reasoning_format;
  // --enable-auto-tool-choice --tool-call-parser; null = off.
  const ToolCallFormat* tool_format = nullptr;
};

// A submitted request: one stream per (prompt, choice).
struct Submitted {
  std::string id;  // "cmpl-..." / "chatcmpl-..."
  int64_t created = 0;
  bool chat = false;
  int top_logprobs = -1;
  bool include_usage = false;
  bool return_token_ids = false;  // vLLM's prompt_token_ids / token_ids fields
  bool prompt_logprobs = false;   // vLLM's prompt_logprobs field (not streamed)
  std::vector<std::shared_ptr<AsyncEngine::Stream>> streams;
  std::vector<std::string> request_ids;
  std::vector<int64_t> prompt_tokens;  // per prompt
  int n = 1;
  // How each chat choice's output is split (ChatOutputParser): nullopt
  // without a reasoning parser, else whether it starts in reasoning; the
  // tool-call format when the request's tools are parsed, else null.
  std::optional<bool> thinking;
  const ToolCallFormat* tool_format = nullptr;
  bool parses_output() const { return chat && (thinking || tool_format); }
};

// Validates, prepares prompts and submits; throws ApiError.
Submitted submit_generation(GenerationContext& ctx, const GenerationRequest& req,
                            const std::string& id);

// Waits for every choice and builds the JSON response.
nlohmann::json collect_response(GenerationContext& ctx, Submitted& sub);

// Server-sent events, pulled chunk by chunk. next_events() returns the text
// to send now ("" when nothing is ready after waiting up to `wait`) and sets
// *finished after the final "data: [DONE]". An event-driven caller, woken
// by the streams' listeners, passes wait = 0.
class EventStream {
 public:
  EventStream(GenerationContext& ctx, Submitted sub);
  ~EventStream();
  std::string next_events(bool* finished,
                          std::chrono::milliseconds wait = std::chrono::milliseconds(50));
  // The client went away: abort every unfinished choice.
  void abort_all(const char* why);

 private:
  std::string chunk_for(size_t choice, const RequestOutput& out);
  // The delta objects an output gives when its text is parsed: reasoning
  // and content, then each completed tool call as two deltas (its id and
  // name, then its arguments), as OpenAI streams them.
  std::vector<nlohmann::json> parsed_deltas(size_t choice, const RequestOutput& out);
  // Whether an output is worth a chunk (not an empty text delta).
  bool sends(const RequestOutput& out) const;
  GenerationContext& ctx_;
  Submitted sub_;
  std::vector<bool> done_;
  // A choice's first chunk carries the chat role and the prompt ids.
  std::vector<bool> sent_first_;
  // Per choice, with sub_.parses_output(): its parser and how many tool
  // calls it has sent (the next call's index).
  std::vector<ChatOutputParser> parsers_;
  std::vector<int> calls_sent_;
  int64_t completion_tokens_ = 0;
  bool finished_ = false;
};

}  // namespace pagoda::server
