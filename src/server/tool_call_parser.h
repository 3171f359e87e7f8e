// vLLM's --tool-call-parser: finds the tool calls a model writes in its
// output (between the markers of its format) and returns them as OpenAI
// tool calls, the rest as content. Works on text pieces as they arrive,
// and decides only from complete text, so the whole output fed at once
// gives exactly what the same output fed piece by piece gives (the
// non-streaming response is the streamed one, joined).
//
// A call is returned once its end marker (or the end of the output) is
// seen: its name and arguments then go out together, name first. A call
// that does not parse (bad JSON, no name) and everything after it is
// returned as content, markers included, never as an error.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda::server {

struct ParsedToolCall {
  std::string name;
  std::string arguments;  // a JSON object, as text
  bool operator==(const ParsedToolCall&) const = default;
};

// How one model family writes its calls: an optional region around all of
// them (DeepSeek's tool_calls_begin/end; empty for hermes), each call
// between call_begin and call_end, and what the text between those is.
struct ToolCallFormat {
  std::string region_begin, region_end;
  std::string call_begin, call_end;
  // The call between the markers, or nullopt when it is malformed.
  std::function<std::optional<ParsedToolCall>(std::string_view body)> parse_call;
  // The grammar (GBNF) of what goes between the markers, given the name as
  // a GBNF literal, the rule of its arguments object and how a marker is
  // written in GBNF (a token terminal where the vocabulary has it as one
  // token): what a call must look like when tool_choice forces one
  // (tool_choice_grammar.h).
  using MarkerGbnf = std::function<std::string(const std::string& marker)>;
  std::function<std::string(const std::string& name, const std::string& args_rule, const MarkerGbnf& marker)>
      call_grammar;
};

// The formats by vLLM's names (hermes, deepseek_v3, deepseek_v31); null for
// an unknown name.
const ToolCallFormat* tool_call_format(std::string_view name);
// "hermes, deepseek_v3, deepseek_v31", for messages.
const char* tool_call_format_names();

struct ToolCallDelta {
  std::string content;
  std::vector<ParsedToolCall> calls;  // completed in this piece, in order
};

class ToolCallParser {
 public:
  explicit ToolCallParser(const ToolCallFormat& format) : format_(format) {}
  ToolCallDelta feed(std::string_view text);
  ToolCallDelta finish();

 private:
  enum class State { Content, Region, Text };
  // Parses what is buffered as far as it can; `final` when no more text
  // will come.
  void advance(ToolCallDelta& out, bool final);
  void give_up(ToolCallDelta& out);
  const std::string& first_marker() const;

  const ToolCallFormat& format_;
  State state_ = State::Content;
  std::string buf_;  // text not yet decided
  // Within a region: the raw text since the region began that no parsed
  // call has used, returned as content if a call in it is malformed.
  std::string region_raw_;
};

}  // namespace pagoda::server
