#include "server/reasoning_parser.h"

#include "server/marker_scan.h"

namespace pagoda::server {

namespace {

constexpr std::string_view kStart = "<think>";
constexpr std::string_view kEnd = "</think>";

// A chat_template_kwargs flag: true/false when given as a boolean, else
// nullopt (vLLM reads it with bool(), but a template only tests it as one).
std::optional<bool> flag(const nlohmann::ordered_json& kwargs, const char* key) {
  if (!kwargs.is_object() || !kwargs.contains(key) || !kwargs[key].is_boolean()) return std::nullopt;
  return kwargs[key].get<bool>();
}

}  // namespace

std::optional<ReasoningFormat> reasoning_format_from_name(std::string_view name) {
  if (name == "qwen3") return ReasoningFormat::Qwen3;
  if (name == "deepseek_r1") return ReasoningFormat::DeepSeekR1;
  if (name == "deepseek_v3") return ReasoningFormat::DeepSeekV3;
  return std::nullopt;
}

const char* reasoning_format_names() { return "qwen3, deepseek_r1, deepseek_v3"; }

bool starts_thinking(ReasoningFormat format, const nlohmann::ordered_json& kwargs) {
  switch (format) {
    case ReasoningFormat::Qwen3:
      return flag(kwargs, "enable_thinking").value_or(true);
    case ReasoningFormat::DeepSeekR1:
      return true;
    case ReasoningFormat::DeepSeekV3:
      return flag(kwargs, "thinking").value_or(false) ||
             flag(kwargs, "enable_thinking").value_or(false);
  }
  return false;
}

ReasoningSplitter::ReasoningSplitter(bool thinking)
    : state_(thinking ? State::Start : State::Content) {}

ReasoningDelta ReasoningSplitter::feed(std::string_view text) {
  ReasoningDelta out;
  if (state_ == State::Content) {
    out.content = text;
    return out;
  }
  held_ += text;
  if (state_ == State::Start) {
    // Only an opening marker the output starts with is one (the templates
    // that leave it to the model make it the first thing written).
    if (held_.size() < kStart.size() && kStart.substr(0, held_.size()) == held_) return out;
    if (held_.starts_with(kStart)) held_.erase(0, kStart.size());
    state_ = State::Reasoning;
  }
  const size_t end = held_.find(kEnd);
  if (end != std::string::npos) {
    out.reasoning = held_.substr(0, end);
    out.content = held_.substr(end + kEnd.size());
    held_.clear();
    state_ = State::Content;
    return out;
  }
  const size_t keep = partial_marker_suffix(held_, kEnd);
  out.reasoning = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

ReasoningDelta ReasoningSplitter::finish() {
  ReasoningDelta out;
  // A partial marker at the end was reasoning text after all.
  out.reasoning = std::move(held_);
  held_.clear();
  return out;
}

}  // namespace pagoda::server
