// One chat choice's output, split as the server was configured: reasoning
// first (--reasoning-parser), then tool calls in what is left
// (--tool-call-parser), as vLLM orders them. Streaming and non-streaming
// responses both go through it, so they cannot disagree.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/reasoning_parser.h"
#include "server/tool_call_parser.h"

namespace pagoda::server {

struct ChatOutputDelta {
  std::string reasoning;
  std::string content;
  std::vector<ParsedToolCall> calls;
  bool empty() const { return reasoning.empty() && content.empty() && calls.empty(); }
};

class ChatOutputParser {
 public:
  // thinking: nullopt without a reasoning parser, else whether the output
  // starts in reasoning (starts_thinking). tools: null when tool calls are
  // not parsed for this request.
  ChatOutputParser(std::optional<bool> thinking, const ToolCallFormat* tools);
  ChatOutputDelta feed(std::string_view text);
  ChatOutputDelta finish();

 private:
  void add_content(std::string_view text, ChatOutputDelta& out, bool final);
  std::optional<ReasoningSplitter> reasoning_;
  std::optional<ToolCallParser> tools_;
};

}  // namespace pagoda::server
