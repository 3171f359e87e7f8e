// Shared by the speculative decoding tests (n-gram and draft-model
// proposers): prompts, a step-by-step runner that checks the engine's
// invariants after every step, output comparison and a two-sample
// chi-square test.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/llm_engine.h"
#include "engine_test_util.h"

namespace pagoda::test::spec {

inline const std::string kModel = test::kDemoModel;

inline SpeculativeConfig ngram(int k, int min_n, int max_n, bool adaptive = false) {
  SpeculativeConfig c;
  c.method = SpeculativeMethod::Ngram;
  c.num_speculative_tokens = k;
  c.prompt_lookup_min = min_n;
  c.prompt_lookup_max = max_n;
  c.adaptive = adaptive;
  return c;
}

// Prompts whose greedy continuation repeats itself or the prompt (so drafts
// are accepted) and ordinary ones (so most are rejected).
inline std::vector<std::string> many_prompts() {
  return {"Once upon a time",
          "Lily and Tom went to the park",
          "The little dog",
          "One day, a big bird",
          "Sam had a red ball",
          "The sun was hot and",
          "There was a tiny mouse",
          "Mom said",
          "The cat sat. The cat sat. The cat sat. The cat",
          "Tom said hi. Tom said hi. Tom said",
          "a b c d a b c d a b c d a b",
          "Lily liked to play. Lily liked to play. Lily liked to",
          "He ran and ran and ran and ran and",
          "Once upon a time, there was a little girl named Lily. Once upon a time, there was a",
          "The dog was happy. The cat was happy. The bird was",
          "Ben"};
}

// Runs the prompts to the end step by step, checking the engine's
// invariants after each step; returns outputs in prompt order.
inline std::vector<RequestOutput> run(LLMEngine& engine, const std::vector<std::string>& prompts,
                               const std::vector<SamplingParams>& params) {
  std::vector<RequestOutput> out(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    engine.add_request(std::to_string(i), engine.tokenizer().encode(prompts[i], true),
                       params[params.size() == 1 ? 0 : i]);
  }
  while (engine.has_unfinished()) {
    for (RequestOutput& o : engine.step()) {
      if (o.finished) out[std::stoul(o.request_id)] = std::move(o);
    }
    engine.check_invariants();
  }
  EXPECT_EQ(engine.num_free_kv_blocks(), engine.num_kv_blocks()) << "a block leaked";
  return out;
}

inline std::vector<RequestOutput> run(const EngineOptions& o, const std::vector<std::string>& prompts,
                               const std::vector<SamplingParams>& params) {
  LLMEngine engine(kModel, o);
  return run(engine, prompts, params);
}

inline void expect_same(const std::vector<RequestOutput>& spec, const std::vector<RequestOutput>& plain) {
  ASSERT_EQ(spec.size(), plain.size());
  for (size_t i = 0; i < spec.size(); ++i) {
    EXPECT_EQ(spec[i].token_ids, plain[i].token_ids) << "prompt " << i;
    EXPECT_EQ(spec[i].text, plain[i].text) << "prompt " << i;
    EXPECT_EQ(spec[i].finish_reason, plain[i].finish_reason) << "prompt " << i;
  }
}


// Two-sample chi-square statistic of two count tables over the same
// categories (those with fewer than 10 samples in all merged), and its
// critical value at significance 0.001 (Wilson-Hilferty).
inline std::pair<double, double> two_sample_chi_square(const std::map<int32_t, int64_t>& a,
                                                const std::map<int32_t, int64_t>& b) {
  std::map<int32_t, std::pair<int64_t, int64_t>> cells;
  for (const auto& [k, n] : a) cells[k].first += n;
  for (const auto& [k, n] : b) cells[k].second += n;
  std::vector<std::pair<int64_t, int64_t>> merged(1, {0, 0});  // [0]: the rare ones
  for (const auto& [k, c] : cells) {
    if (c.first + c.second < 10) {
      merged[0].first += c.first;
      merged[0].second += c.second;
    } else {
      merged.push_back(c);
    }
  }
  double na = 0, nb = 0;
  for (const auto& c : merged) na += c.first, nb += c.second;
  double chi = 0;
  int df = -1;
  for (const auto& [x, y] : merged) {
    if (x + y == 0) continue;
    ++df;
    const double ea = (x + y) * na / (na + nb), eb = (x + y) * nb / (na + nb);
    chi += (x - ea) * (x - ea) / ea + (y - eb) * (y - eb) / eb;
  }
  const double h = 2.0 / (9.0 * df);
  return {chi, df * std::pow(1 - h + 3.0902 * std::sqrt(h), 3)};
}

}  // namespace pagoda::test::spec
