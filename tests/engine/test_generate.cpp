// End-to-end greedy generation on the real stories260k model against the
// goldens produced by an independent implementation (llama2.c + a numpy
// reference), and batch-composition independence.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/llm.h"
#include "engine_test_util.h"

namespace pagoda {
namespace {

struct Golden {
  std::string prompt;
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> greedy_ids;
  std::string text;
};

std::vector<Golden> load_goldens(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << path;
  std::vector<Golden> goldens;
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    goldens.push_back({j["prompt"], j["prompt_token_ids"], j["greedy_token_ids"], j["text"]});
  }
  return goldens;
}

SamplingParams greedy(int max_tokens) { return test::greedy(max_tokens, /*ignore_eos=*/false); }

void check_goldens(const std::string& model_dir, const EngineOptions& options) {
  const auto goldens = load_goldens(model_dir + "/golden.jsonl");
  ASSERT_EQ(goldens.size(), 3u);
  LLM llm(model_dir, options);
  std::vector<std::string> prompts;
  for (const Golden& g : goldens) prompts.push_back(g.prompt);
  const auto outputs = llm.generate(prompts, greedy(64));
  ASSERT_EQ(outputs.size(), goldens.size());
  for (size_t i = 0; i < goldens.size(); ++i) {
    EXPECT_EQ(outputs[i].prompt_ids, goldens[i].prompt_ids) << goldens[i].prompt;
    EXPECT_EQ(outputs[i].token_ids, goldens[i].greedy_ids) << goldens[i].prompt;
    EXPECT_EQ(outputs[i].text, goldens[i].text) << goldens[i].prompt;
    EXPECT_EQ(outputs[i].finish_reason, FinishReason::Length);
  }
}

TEST(Generate, Stories260kF32MatchesGoldens) {
  check_goldens(PAGODA_MODELS_DIR "/stories260k", {});
}

TEST(Generate, Stories260kBf16MatchesGoldens) {
  check_goldens(PAGODA_TEST_DATA_DIR "/stories260k-bf16", {});
}

TEST(Generate, GoldensWithBlockSizeOneAndOneThread) {
  EngineOptions o;
  o.block_size = 1;
  o.num_threads = 1;
  check_goldens(PAGODA_MODELS_DIR "/stories260k", o);
}

const std::vector<std::string> kEightPrompts = {
    "Once upon a time",       "Lily and Tom went to the park",
    "The little dog",         "One day, a big bird",
    "Sam had a red ball",     "The sun was hot and",
    "There was a tiny mouse", "Mom said"};

TEST(Generate, BatchedEqualsAlone) {
  EngineOptions o;
  LLM llm(PAGODA_MODELS_DIR "/stories260k", o);
  const auto batched = llm.generate(kEightPrompts, greedy(48));
  for (size_t i = 0; i < kEightPrompts.size(); ++i) {
    const auto alone = llm.generate({kEightPrompts[i]}, greedy(48));
    EXPECT_EQ(batched[i].token_ids, alone[0].token_ids) << kEightPrompts[i];
    EXPECT_EQ(batched[i].text, alone[0].text) << kEightPrompts[i];
  }
}

TEST(Generate, MasksThatAllowNothingStopTheRequest) {
  // Every token masked (the only allowed id is a bad word): the request
  // finishes with reason stop and no token, and the engine goes on.
  LLM llm(PAGODA_MODELS_DIR "/stories260k");
  SamplingParams p = greedy(8);
  p.allowed_token_ids = {5};
  p.bad_words_token_ids = {{5}};
  const auto out = llm.generate({Prompt::from_text("Once upon a time")}, {p});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].token_ids.empty());
  EXPECT_EQ(out[0].finish_reason, FinishReason::Stop);
  EXPECT_EQ(llm.engine().num_free_kv_blocks(), llm.engine().num_kv_blocks());
  EXPECT_EQ(llm.generate({"Once upon a time"}, greedy(8))[0].token_ids.size(), 8u);
}

TEST(Generate, ChunkedPrefillAndTinyPoolGiveSameTokens) {
  const auto reference = LLM(PAGODA_MODELS_DIR "/stories260k").generate(kEightPrompts, greedy(40));
  EngineOptions o;
  o.max_num_batched_tokens = 6;  // long prompts prefill in chunks, mixed with decodes
  o.block_size = 4;
  o.max_model_len = 64;
  // Room for about two sequences: forces preemption and recomputation.
  o.kv_cache_memory = 5 * 2 * 4 * 8 * 4 * 4 * 40;
  LLM llm(PAGODA_MODELS_DIR "/stories260k", o);
  const auto outputs = llm.generate(kEightPrompts, greedy(40));
  int64_t preemptions = 0;
  for (size_t i = 0; i < kEightPrompts.size(); ++i) {
    EXPECT_EQ(outputs[i].token_ids, reference[i].token_ids) << kEightPrompts[i];
    preemptions += outputs[i].metrics.num_preemptions;
  }
  EXPECT_GT(preemptions, 0);
  // The engine-wide count (/metrics) is the sum of the requests' own.
  EXPECT_EQ(llm.engine().stats().num_preemptions, preemptions);
  EXPECT_EQ(llm.engine().num_free_kv_blocks(), llm.engine().num_kv_blocks());
}

TEST(Generate, BadPromptIsRefusedBeforeAnyWork) {
  LLM llm(PAGODA_MODELS_DIR "/stories260k");
  EXPECT_THROW(llm.generate({Prompt::from_ids({1, 99999})}, {greedy(4)}), InputError);
  EXPECT_THROW(llm.generate({Prompt::from_ids(std::vector<int32_t>(600, 5))}, {greedy(4)}),
               InputError);
  SamplingParams bad = greedy(4);
  bad.top_p = 0;
  EXPECT_THROW(llm.generate({"hi"}, bad), InputError);
  // The engine is still usable afterwards.
  EXPECT_EQ(llm.generate({"Once upon a time"}, greedy(4))[0].token_ids.size(), 4u);
  EXPECT_EQ(llm.engine().num_free_kv_blocks(), llm.engine().num_kv_blocks());
}

// A progress callback that throws (how the Python package turns Ctrl-C into
// KeyboardInterrupt) ends the call with every request aborted: the KV
// blocks are back in the pool and the next call gives what a fresh engine
// gives (before the fix the aborts leaked into that call's steps).
TEST(Generate, ThrowingProgressAbortsTheCallAndFreesItsBlocks) {
  LLM llm(PAGODA_MODELS_DIR "/stories260k");
  const auto expected = llm.generate({"Once upon a time"}, greedy(16))[0].token_ids;
  struct Interrupt {};
  int steps = 0;
  const std::vector<Prompt> prompts(8, Prompt::from_text("The little dog"));
  EXPECT_THROW(llm.generate(prompts, {test::greedy(200, /*ignore_eos=*/true)},
                            [&](size_t, size_t) {
                              if (++steps == 5) throw Interrupt{};
                            }),
               Interrupt);
  EXPECT_EQ(steps, 5);
  EXPECT_FALSE(llm.engine().has_unfinished());
  EXPECT_EQ(llm.engine().num_free_kv_blocks(), llm.engine().num_kv_blocks());
  EXPECT_EQ(llm.generate({"Once upon a time"}, greedy(16))[0].token_ids, expected);
}

TEST(Generate, SeededSamplingIsReproducible) {
  LLM llm(PAGODA_MODELS_DIR "/stories260k");
  SamplingParams p;
  p.temperature = 0.9f;
  p.top_p = 0.9f;
  p.max_tokens = 32;
  p.seed = 1234;
  const auto a = llm.generate({"Once upon a time", "The little dog"}, p);
  const auto b = llm.generate({"The little dog", "Once upon a time"}, p);
  EXPECT_EQ(a[0].token_ids, b[1].token_ids);
  EXPECT_EQ(a[1].token_ids, b[0].token_ids);
}

// Rows of a step are sampled in parallel: each request's tokens, logprobs
// and penalties must come from its own logits and rng, whatever its
// neighbours and the thread that sampled it.
TEST(Generate, SampledRowsOfABatchEqualEachRequestAlone) {
  LLM llm(PAGODA_MODELS_DIR "/stories260k");
  const std::vector<std::string> prompts = {"Once upon a time", "The little dog",  "Lily saw",
                                            "One day",          "Tom and his mom", "The sun"};
  std::vector<SamplingParams> params;
  for (size_t i = 0; i < prompts.size(); ++i) {
    SamplingParams p;
    p.temperature = 0.8f + 0.1f * static_cast<float>(i % 3);
    p.top_k = 20;
    p.repetition_penalty = i % 2 ? 1.3f : 1.0f;
    p.frequency_penalty = i % 3 == 0 ? 0.5f : 0.0f;
    p.logprobs = 2;
    p.max_tokens = 24;
    p.seed = 100 + i;
    params.push_back(p);
  }
  std::vector<Prompt> batch;
  for (const std::string& p : prompts) batch.push_back(Prompt::from_text(p));
  const auto together = llm.generate(batch, params);
  ASSERT_EQ(together.size(), prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto alone = llm.generate({batch[i]}, {params[i]})[0];
    EXPECT_EQ(together[i].token_ids, alone.token_ids) << prompts[i];
    ASSERT_EQ(together[i].logprobs.size(), alone.logprobs.size()) << prompts[i];
    for (size_t t = 0; t < alone.logprobs.size(); ++t) {
      EXPECT_EQ(together[i].logprobs[t].token, alone.logprobs[t].token);
      EXPECT_EQ(together[i].logprobs[t].top_logprobs, alone.logprobs[t].top_logprobs);
    }
  }
}

// min_tokens masks the stop ids in the engine's step: a stop token the
// model picks greedily at output 3 ends the request there without it, and
// cannot appear among the first 6 outputs with min_tokens = 6.
TEST(Generate, MinTokensHoldsBackStopTokenIds) {
  LLM llm(PAGODA_MODELS_DIR "/stories260k");
  const Golden golden = load_goldens(PAGODA_MODELS_DIR "/stories260k/golden.jsonl")[0];
  const int32_t stop = golden.greedy_ids[3];
  SamplingParams p = greedy(16);
  p.stop_token_ids = {stop};
  const auto early = llm.generate({golden.prompt}, p)[0];
  EXPECT_EQ(early.finish_reason, FinishReason::Stop);
  EXPECT_LE(early.token_ids.size(), 4u);
  p.min_tokens = 6;
  const auto held = llm.generate({golden.prompt}, p)[0];
  ASSERT_GE(held.token_ids.size(), 6u);
  for (int t = 0; t < 6; ++t) EXPECT_NE(held.token_ids[t], stop) << t;
}

TEST(Generate, StopStringEndsGenerationAndIsCut) {
  LLM llm(PAGODA_MODELS_DIR "/stories260k");
  SamplingParams p = greedy(64);
  p.stop = {"park"};
  const Golden golden = load_goldens(PAGODA_MODELS_DIR "/stories260k/golden.jsonl")[0];
  const size_t cut = golden.text.find("park");
  ASSERT_NE(cut, std::string::npos);
  const auto out = llm.generate({golden.prompt}, p)[0];
  EXPECT_EQ(out.text, golden.text.substr(0, cut));
  EXPECT_EQ(out.finish_reason, FinishReason::Stop);
}

}  // namespace
}  // namespace pagoda
