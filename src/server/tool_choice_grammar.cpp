#include "server/tool_choice_grammar.h"

#include "core/error.h"
#include "server/api_error.h"
#include "structured/json_schema_to_grammar.h"
#include "structured/regex_to_grammar.h"

namespace pagoda::server {

std::string tool_choice_gbnf(const ToolCallFormat& format, const nlohmann::ordered_json& tools,
                             const std::string& only, const structured::TokenVocab* vocab) {
  using structured::gbnf_literal;
  const ToolCallFormat::MarkerGbnf marker = [vocab](const std::string& text) {
    const auto id = vocab ? vocab->find_token(text) : std::nullopt;
    return id ? "<[" + std::to_string(*id) + "]>" : gbnf_literal(text);
  };
  std::string rules, calls;
  for (size_t i = 0; i < tools.size(); ++i) {
    const auto& t = tools[i];
    if (!t.is_object() || !t.contains("function") || !t["function"].is_object() ||
        !t["function"].contains("name") || !t["function"]["name"].is_string())
      throw bad_request("tools[" + std::to_string(i) + "] must be {\"type\": \"function\", \"function\": {\"name\": ...}}",
                        "tools");
    const auto& fn = t["function"];
    const std::string name = fn["name"].get<std::string>();
    if (!only.empty() && name != only) continue;
    const nlohmann::ordered_json params =
        fn.contains("parameters") && !fn["parameters"].is_null()
            ? fn["parameters"]
            : nlohmann::ordered_json{{"type", "object"}, {"properties", nlohmann::ordered_json::object()}};
    const std::string args = "args-" + std::to_string(i);
    try {
      rules += structured::json_schema_to_gbnf(params, args, "t" + std::to_string(i) + "-");
    } catch (const InputError& e) {
      throw bad_request("tools[" + std::to_string(i) + "] (" + name + ") parameters: " + e.what(), "tools");
    }
    calls += (calls.empty() ? "" : " | ") + format.call_grammar(gbnf_literal(name), args, marker);
  }
  if (calls.empty()) {
    throw bad_request("tool_choice names function \"" + only + "\", which is not among the tools",
                      "tool_choice");
  }
  const std::string call = marker(format.call_begin) + " (" + calls + ") " + marker(format.call_end);
  const std::string sep = format.region_begin.empty() ? "\"\\n\" " : "";
  std::string root = "root ::= ";
  if (!format.region_begin.empty()) root += marker(format.region_begin) + " ";
  root += "call";
  if (only.empty()) root += " (" + sep + "call){0,3}";
  if (!format.region_end.empty()) root += " " + marker(format.region_end);
  return root + "\ncall ::= " + call + "\n" + rules;
}

}  // namespace pagoda::server
