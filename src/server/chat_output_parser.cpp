#include "server/chat_output_parser.h"

namespace pagoda::server {

ChatOutputParser::ChatOutputParser(std::optional<bool> thinking, const ToolCallFormat* tools) {
  if (thinking) reasoning_.emplace(*thinking);
  if (tools) tools_.emplace(*tools);
}

void ChatOutputParser::add_content(std::string_view text, ChatOutputDelta& out, bool final) {
  if (!tools_) {
    out.content += text;
    return;
  }
  ToolCallDelta d = tools_->feed(text);
  if (final) {
    ToolCallDelta rest = tools_->finish();
    d.content += rest.content;
    for (auto& c : rest.calls) d.calls.push_back(std::move(c));
  }
  out.content += d.content;
  for (auto& c : d.calls) out.calls.push_back(std::move(c));
}

ChatOutputDelta ChatOutputParser::feed(std::string_view text) {
  ChatOutputDelta out;
  if (!reasoning_) {
    add_content(text, out, false);
    return out;
  }
  ReasoningDelta r = reasoning_->feed(text);
  out.reasoning = std::move(r.reasoning);
  add_content(r.content, out, false);
  return out;
}

ChatOutputDelta ChatOutputParser::finish() {
  ChatOutputDelta out;
  if (reasoning_) {
    ReasoningDelta r = reasoning_->finish();
    out.reasoning = std::move(r.reasoning);
    add_content(r.content, out, true);
  } else {
    add_content("", out, true);
  }
  return out;
}

}  // namespace pagoda::server
