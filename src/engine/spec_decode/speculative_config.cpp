#include "engine/spec_decode/speculative_config.h"

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace pagoda {

const char* speculative_method_name(SpeculativeMethod method) {
  switch (method) {
    case SpeculativeMethod::Ngram: return "ngram";
    case SpeculativeMethod::DraftModel: return "draft_model";
    case SpeculativeMethod::Mtp: return "mtp";
  }
  return "";
}

namespace {

int32_t int_key(const nlohmann::json& j, const char* key, int32_t lo, int32_t hi) {
  const nlohmann::json& v = j.at(key);
  if (!v.is_number_integer()) throw_input_error("--speculative-config: \"{}\" must be an integer", key);
  const int64_t n = v.get<int64_t>();
  if (n < lo || n > hi) {
    throw_input_error("--speculative-config: \"{}\" is {}, must be in [{}, {}]", key, n, lo, hi);
  }
  return static_cast<int32_t>(n);
}

}  // namespace

SpeculativeConfig parse_speculative_config(const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw_input_error("--speculative-config is not valid JSON: {}", e.what());
  }
  if (!j.is_object()) throw_input_error("--speculative-config must be a JSON object");
  for (const auto& [key, value] : j.items()) {
    if (key != "method" && key != "num_speculative_tokens" && key != "prompt_lookup_min" &&
        key != "prompt_lookup_max" && key != "model" && key != "adaptive") {
      throw_input_error(
          "--speculative-config: unknown key \"{}\" (known: method, num_speculative_tokens, "
          "prompt_lookup_min, prompt_lookup_max, model, adaptive)",
          key);
    }
  }
  SpeculativeConfig c;
  if (j.contains("model")) {
    if (!j["model"].is_string() || j["model"].get<std::string>().empty())
      throw_input_error("--speculative-config: \"model\" must be a non-empty string");
    c.model = j["model"].get<std::string>();
    c.method = SpeculativeMethod::DraftModel;
  }
  if (j.contains("method")) {
    if (!j["method"].is_string()) throw_input_error("--speculative-config: \"method\" must be a string");
    const std::string m = j["method"].get<std::string>();
    if (m == "ngram") {
      c.method = SpeculativeMethod::Ngram;
    } else if (m == "draft_model") {
      c.method = SpeculativeMethod::DraftModel;
    } else if (m == "mtp" || m == "deepseek_mtp") {
      c.method = SpeculativeMethod::Mtp;
    } else {
      throw_input_error("--speculative-config: unknown method \"{}\" (ngram, draft_model, mtp)", m);
    }
  } else if (!j.contains("model")) {
    throw_input_error("--speculative-config: give \"method\" (ngram, draft_model, mtp)");
  }
  if (!j.contains("num_speculative_tokens"))
    throw_input_error("--speculative-config: \"num_speculative_tokens\" is required");
  c.num_speculative_tokens =
      int_key(j, "num_speculative_tokens", 1, SpeculativeConfig::kMaxSpeculativeTokens);
  const bool has_min = j.contains("prompt_lookup_min"), has_max = j.contains("prompt_lookup_max");
  if (has_min) c.prompt_lookup_min = int_key(j, "prompt_lookup_min", 1, 1024);
  if (has_max) c.prompt_lookup_max = int_key(j, "prompt_lookup_max", 1, 1024);
  if (has_min && !has_max) c.prompt_lookup_max = c.prompt_lookup_min;
  if (has_max && !has_min) c.prompt_lookup_min = c.prompt_lookup_max;
  if (c.prompt_lookup_min > c.prompt_lookup_max) {
    throw_input_error("--speculative-config: prompt_lookup_min {} exceeds prompt_lookup_max {}",
                      c.prompt_lookup_min, c.prompt_lookup_max);
  }
  if (c.method != SpeculativeMethod::Ngram && (has_min || has_max))
    throw_input_error("--speculative-config: prompt_lookup_min/max are for method ngram");
  if (c.method == SpeculativeMethod::DraftModel && c.model.empty())
    throw_input_error("--speculative-config: method draft_model needs \"model\" (a checkpoint directory)");
  if (c.method == SpeculativeMethod::Ngram && !c.model.empty())
    throw_input_error("--speculative-config: method ngram takes no \"model\"");
  if (j.contains("adaptive")) {
    if (!j["adaptive"].is_boolean()) throw_input_error("--speculative-config: \"adaptive\" must be true or false");
    c.adaptive = j["adaptive"].get<bool>();
  }
  return c;
}

}  // namespace pagoda
