// Greedy generation with --quantization int8 on the demo model (f32
// weights): the text stays close to the unquantized run, and, like the
// float engine, does not depend on which requests share a batch.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "engine/llm.h"
#include "engine_test_util.h"

namespace pagoda {
namespace {

using test::greedy;

const std::vector<std::string> kPrompts = {
    "Once upon a time",       "Lily and Tom went to the park",
    "The little dog",         "One day, a big bird",
    "Sam had a red ball",     "The sun was hot and",
    "There was a tiny mouse", "Mom said"};

EngineOptions int8_options() {
  EngineOptions o;
  o.quantization = Quantization::Int8;
  return o;
}

TEST(QuantizedGenerate, GreedyTextMostlyAgreesWithF32) {
  // Tokens of each 32-token continuation equal to the f32 run's before the
  // first difference. Measured over these 8 prompts: 7 of 8 identical, mean
  // common prefix 28.4 tokens; asserted: mean >= 20, at least 4 identical.
  constexpr int kTokens = 32;
  const auto f32 = LLM(test::kDemoModel).generate(kPrompts, greedy(kTokens));
  const auto q8 = LLM(test::kDemoModel, int8_options()).generate(kPrompts, greedy(kTokens));
  ASSERT_EQ(f32.size(), q8.size());
  int identical = 0, total_prefix = 0;
  for (size_t i = 0; i < f32.size(); ++i) {
    ASSERT_EQ(q8[i].token_ids.size(), static_cast<size_t>(kTokens));
    int prefix = 0;
    while (prefix < kTokens && f32[i].token_ids[prefix] == q8[i].token_ids[prefix]) ++prefix;
    total_prefix += prefix;
    identical += prefix == kTokens;
    std::printf("prompt %zu: %d/%d tokens agree\n", i, prefix, kTokens);
  }
  const double mean = static_cast<double>(total_prefix) / static_cast<double>(f32.size());
  std::printf("int8 vs f32: %d of %zu identical, mean common prefix %.1f\n", identical, f32.size(),
              mean);
  EXPECT_GE(mean, 20.0);
  EXPECT_GE(identical, 4);
}

TEST(QuantizedGenerate, BatchedEqualsAlone) {
  // Per-token activation quantization: a row's result does not depend on
  // the other rows in the step (prefill with others, decode alone).
  LLM llm(test::kDemoModel, int8_options());
  const auto batched = llm.generate(kPrompts, greedy(40));
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    const auto alone = llm.generate({kPrompts[i]}, greedy(40));
    EXPECT_EQ(alone[0].token_ids, batched[i].token_ids) << kPrompts[i];
  }
}

}  // namespace
}  // namespace pagoda
