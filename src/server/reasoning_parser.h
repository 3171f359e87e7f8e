// vLLM's --reasoning-parser: the text a thinking model writes between its
// think markers goes to reasoning_content, the rest to content. Works on
// text pieces as they are generated, so markers split across tokens (or
// across any two pieces) are still found; the whole output fed at once
// splits exactly as the same output fed piece by piece.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace pagoda::server {

// The parsers by vLLM's names; all use <think> ... </think>.
enum class ReasoningFormat { Qwen3, DeepSeekR1, DeepSeekV3 };

// nullopt for an unknown name.
std::optional<ReasoningFormat> reasoning_format_from_name(std::string_view name);
// "qwen3, deepseek_r1, deepseek_v3", for messages.
const char* reasoning_format_names();

// Whether a request's output starts in reasoning, from its
// chat_template_kwargs, as vLLM decides it: qwen3 thinks unless
// enable_thinking is false; deepseek_r1 always thinks; deepseek_v3 only
// when thinking or enable_thinking is true (V3.1's template default is off).
// When false the output is all content: the template has closed the
// think block in the prompt (vLLM routes such output straight to content).
bool starts_thinking(ReasoningFormat format, const nlohmann::ordered_json& chat_template_kwargs);

struct ReasoningDelta {
  std::string reasoning;
  std::string content;
};

// Splits one choice's output. With thinking on, a leading <think> is
// dropped, everything up to </think> is reasoning and everything after is
// content; with no </think> at all (a truncated output) everything is
// reasoning, as vLLM's parsers return it.
class ReasoningSplitter {
 public:
  explicit ReasoningSplitter(bool thinking);
  // The next piece of output text; returns what can be told apart now.
  // Text that may be the start of a marker is held until the next piece.
  ReasoningDelta feed(std::string_view text);
  // The output has ended: what was held back.
  ReasoningDelta finish();

 private:
  enum class State { Start, Reasoning, Content };
  State state_;
  std::string held_;
};

}  // namespace pagoda::server
