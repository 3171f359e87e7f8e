// Speculative decoding settings (vLLM's SpeculativeConfig and its
// --speculative-config JSON keys): which proposer drafts tokens and how
// many a request verifies per step.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace pagoda {

enum class SpeculativeMethod { Ngram, DraftModel, Mtp };
const char* speculative_method_name(SpeculativeMethod method);  // "ngram", "draft_model", "mtp"

struct SpeculativeConfig {
  SpeculativeMethod method = SpeculativeMethod::Ngram;
  int32_t num_speculative_tokens = 0;  // k: draft tokens per request and step
  static constexpr int32_t kMaxSpeculativeTokens = 32;  // the most k parse_speculative_config accepts
  // ngram: the longest and shortest suffix of the context looked up in it.
  int32_t prompt_lookup_min = 5;
  int32_t prompt_lookup_max = 5;
  std::string model;  // draft_model: the draft checkpoint's directory
  // Pagoda's own key: a request whose measured tokens per verify step fall
  // below the break-even (spec_decode/adaptive_speculation.h) stops
  // speculating. On by default; false keeps every request speculating.
  bool adaptive = true;
};

// Parses vLLM's JSON ('{"method": "ngram", "num_speculative_tokens": 4,
// "prompt_lookup_max": 4}'); unknown keys, wrong types and values out of
// range throw InputError naming the key. As vLLM: with only one of
// prompt_lookup_min/max given the other takes its value; neither: 5 and 5;
// "model" without "method" means draft_model.
SpeculativeConfig parse_speculative_config(const std::string& json);

}  // namespace pagoda
