// The tool-call formats of the models Pagoda serves, as vLLM's parsers of
// the same names read them and the models' chat templates write them:
//   hermes (Qwen2.5/Qwen3):  <tool_call>\n{"name": N, "arguments": {...}}\n</tool_call>
//   deepseek_v3:   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>N
//                  ```json\n{...}\n```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
//   deepseek_v31:  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>N<｜tool▁sep｜>{...}
//                  <｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
#include <nlohmann/json.hpp>

#include "server/json_depth.h"
#include "server/tool_call_parser.h"

namespace pagoda::server {

namespace {

using Json = nlohmann::ordered_json;

std::string_view trim(std::string_view s) {
  const auto space = [](char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

// Model output parsed as JSON, or discarded (never an exception: a model
// writes broken JSON as often as not). The depth bound keeps nlohmann's
// recursive copies and dumps off a deeply nested output.
Json parse_json(std::string_view text) {
  if (json_exceeds_depth(text)) return Json(Json::value_t::discarded);
  return Json::parse(text, nullptr, /*allow_exceptions=*/false);
}

bool valid_name(std::string_view name) {
  return !name.empty() && name.find_first_of("\n\r\t ") == std::string_view::npos;
}

// A function's arguments: a JSON object, returned as written.
std::optional<std::string> object_text(std::string_view text) {
  text = trim(text);
  const Json j = parse_json(text);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  return std::string(text);
}

std::optional<ParsedToolCall> parse_hermes(std::string_view body) {
  const Json j = parse_json(trim(body));
  if (j.is_discarded() || !j.is_object() || !j.contains("name") || !j["name"].is_string() ||
      !j.contains("arguments") || !j["arguments"].is_object()) {
    return std::nullopt;
  }
  ParsedToolCall call{j["name"].get<std::string>(), j["arguments"].dump()};
  if (!valid_name(call.name)) return std::nullopt;
  return call;
}

constexpr std::string_view kSep = "<｜tool▁sep｜>";

std::optional<ParsedToolCall> parse_deepseek_v3(std::string_view body) {
  const size_t sep = body.find(kSep);
  if (sep == std::string_view::npos || trim(body.substr(0, sep)) != "function") return std::nullopt;
  std::string_view rest = trim(body.substr(sep + kSep.size()));
  constexpr std::string_view kOpen = "\n```json\n", kClose = "```";
  const size_t open = rest.find(kOpen);
  if (open == std::string_view::npos || !rest.ends_with(kClose)) return std::nullopt;
  const std::string_view name = rest.substr(0, open);
  const size_t args_at = open + kOpen.size();
  if (args_at > rest.size() - kClose.size()) return std::nullopt;
  std::optional<std::string> args =
      object_text(rest.substr(args_at, rest.size() - kClose.size() - args_at));
  if (!valid_name(name) || !args) return std::nullopt;
  return ParsedToolCall{std::string(name), std::move(*args)};
}

std::optional<ParsedToolCall> parse_deepseek_v31(std::string_view body) {
  const size_t sep = body.find(kSep);
  if (sep == std::string_view::npos) return std::nullopt;
  const std::string_view name = trim(body.substr(0, sep));
  std::optional<std::string> args = object_text(body.substr(sep + kSep.size()));
  if (!valid_name(name) || !args) return std::nullopt;
  return ParsedToolCall{std::string(name), std::move(*args)};
}

// The grammars of a call's body, as the templates write them (compact
// JSON arguments, which the parsers read like any other).
std::string hermes_call(const std::string& name, const std::string& args, const ToolCallFormat::MarkerGbnf&) {
  return R"("\n{\"name\":\"" )" + name + R"( "\",\"arguments\":" )" + args + R"( "}\n")";
}
std::string deepseek_v3_call(const std::string& name, const std::string& args,
                             const ToolCallFormat::MarkerGbnf& marker) {
  return R"("function" )" + marker(std::string(kSep)) + " " + name + R"( "\n```json\n" )" + args + R"( "\n```")";
}
std::string deepseek_v31_call(const std::string& name, const std::string& args,
                              const ToolCallFormat::MarkerGbnf& marker) {
  return name + " " + marker(std::string(kSep)) + " " + args;
}

const ToolCallFormat kHermes{"", "", "<tool_call>", "</tool_call>", parse_hermes, hermes_call};
const ToolCallFormat kDeepSeekV3{"<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>",
                                 "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", parse_deepseek_v3,
                                 deepseek_v3_call};
const ToolCallFormat kDeepSeekV31{"<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>",
                                  "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>",
                                  parse_deepseek_v31, deepseek_v31_call};

}  // namespace

const ToolCallFormat* tool_call_format(std::string_view name) {
  if (name == "hermes") return &kHermes;
  if (name == "deepseek_v3") return &kDeepSeekV3;
  if (name == "deepseek_v31") return &kDeepSeekV31;
  return nullptr;
}

const char* tool_call_format_names() { return "hermes, deepseek_v3, deepseek_v31"; }

}  // namespace pagoda::server
