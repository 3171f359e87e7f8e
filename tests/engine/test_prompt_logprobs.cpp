// prompt_logprobs against an independent reference: for every prompt
// position k, a separate request with prompt tokens [0, k) samples one
// token, the logits observer records its logits row, and this file takes
// log_softmax, rank and the top N of it in double precision. Then the same
// entries through chunked prefill, preemption, the prefix cache and batches.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/llm.h"
#include "engine_test_util.h"

namespace pagoda {
namespace {

using test::greedy;

struct RefEntry {
  int32_t token = 0;
  double logprob = 0;
  int32_t rank = 0;
  std::vector<int32_t> top_ids;
  std::vector<double> top_logprobs;
};

RefEntry reference_entry(const std::vector<float>& logits, int32_t token, int n) {
  double mx = -INFINITY;
  for (float v : logits) mx = std::max(mx, double{v});
  double z = 0;
  for (float v : logits) z += std::exp(double{v} - mx);
  const double log_z = mx + std::log(z);
  RefEntry e;
  e.token = token;
  e.logprob = logits[token] - log_z;
  for (float v : logits) e.rank += v >= logits[token] ? 1 : 0;
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  for (int k = 0; k < n; ++k) {
    e.top_ids.push_back(order[k]);
    e.top_logprobs.push_back(logits[order[k]] - log_z);
  }
  return e;
}

// Entry k-1 (prompt token k) from the sampling row of prompt [0, k), run
// alone on an engine without prefix caching.
std::vector<RefEntry> reference_entries(const std::vector<int32_t>& prompt, int n) {
  EngineOptions o;
  o.enable_prefix_caching = false;
  LLM llm(test::kDemoModel, o);
  std::vector<float> row;
  llm.engine().set_logits_observer([&](const std::string&, const float* logits, int64_t vocab) {
    row.assign(logits, logits + vocab);
  });
  std::vector<RefEntry> entries;
  for (size_t k = 1; k < prompt.size(); ++k) {
    row.clear();
    llm.generate({Prompt::from_ids({prompt.begin(), prompt.begin() + k})}, {greedy(1)});
    EXPECT_FALSE(row.empty());
    entries.push_back(reference_entry(row, prompt[k], n));
  }
  return entries;
}

void expect_matches(const PromptLogprobs* got, const std::vector<RefEntry>& want,
                    const std::string& what) {
  ASSERT_NE(got, nullptr) << what;
  ASSERT_TRUE(got->complete()) << what;
  ASSERT_EQ(got->size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got->token(i), want[i].token) << what << " entry " << i;
    EXPECT_NEAR(got->logprob(i), want[i].logprob, 1e-4) << what << " entry " << i;
    EXPECT_EQ(got->rank(i), want[i].rank) << what << " entry " << i;
    ASSERT_EQ(got->top_ids(i).size(), want[i].top_ids.size());
    for (size_t k = 0; k < want[i].top_ids.size(); ++k) {
      EXPECT_EQ(got->top_ids(i)[k], want[i].top_ids[k]) << what << " entry " << i << " top " << k;
      EXPECT_NEAR(got->top_logprobs(i)[k], want[i].top_logprobs[k], 1e-4) << what;
    }
  }
}

SamplingParams scoring(int max_tokens, int n) {
  SamplingParams p = greedy(max_tokens);
  p.prompt_logprobs = n;
  return p;
}

const std::vector<std::string> kPrompts = {
    "Once upon a time, there was a little girl named Lily. She liked to play",
    "The little dog ran to the park", "Sam had a red ball and a big blue kite", "Mom said"};

TEST(PromptLogprobs, EqualLogSoftmaxOfEachPrefixSamplingRow) {
  LLM llm(test::kDemoModel);
  const std::vector<int32_t> prompt = llm.encode(kPrompts[0]);
  ASSERT_GT(prompt.size(), 16u);
  const auto out = llm.generate({Prompt::from_ids(prompt)}, {scoring(4, 5)});
  expect_matches(out[0].prompt_logprobs.get(), reference_entries(prompt, 5), "alone");
  // Scoring the prompt does not change what is generated.
  EXPECT_EQ(out[0].token_ids, llm.generate({Prompt::from_ids(prompt)}, {greedy(4)})[0].token_ids);
}

TEST(PromptLogprobs, RawDistributionWhateverTheSamplingParams) {
  LLM llm(test::kDemoModel);
  const std::vector<int32_t> prompt = llm.encode(kPrompts[1]);
  SamplingParams hot = scoring(3, 2);
  hot.temperature = 1.7f;
  hot.repetition_penalty = 2.0f;
  hot.seed = 3;
  const auto out = llm.generate({Prompt::from_ids(prompt)}, {hot});
  expect_matches(out[0].prompt_logprobs.get(), reference_entries(prompt, 2), "sampled");
}

// Chunks of 6 tokens mixed with decodes, and a pool so small that requests
// are preempted and recomputed: every entry is written once, in order, and
// equals the request's entries alone.
TEST(PromptLogprobs, ChunkedPrefillAndPreemptionAddNoEntryTwice) {
  std::vector<Prompt> prompts;
  std::vector<std::vector<RefEntry>> want;
  {
    LLM plain(test::kDemoModel);
    for (const std::string& p : kPrompts) prompts.push_back(Prompt::from_ids(plain.encode(p)));
  }
  for (const Prompt& p : prompts) want.push_back(reference_entries(p.token_ids, 3));
  EngineOptions o;
  o.max_num_batched_tokens = 6;
  o.block_size = 4;
  o.max_model_len = 64;
  o.kv_cache_memory = 5 * 2 * 4 * 8 * 4 * 4 * 40;  // about two sequences
  LLM llm(test::kDemoModel, o);
  std::vector<Prompt> many;
  for (int rep = 0; rep < 2; ++rep) many.insert(many.end(), prompts.begin(), prompts.end());
  const auto outs = llm.generate(many, {scoring(40, 3)});
  int64_t preemptions = 0;
  for (size_t i = 0; i < many.size(); ++i) {
    expect_matches(outs[i].prompt_logprobs.get(), want[i % prompts.size()],
                   "chunked #" + std::to_string(i));
    preemptions += outs[i].metrics.num_preemptions;
  }
  EXPECT_GT(preemptions, 0);
  EXPECT_EQ(llm.engine().num_free_kv_blocks(), llm.engine().num_kv_blocks());
}

// A request that scores its prompt computes it even when the prefix cache
// holds it (a hit would skip the positions it reports), and its own blocks
// are cached for later requests.
TEST(PromptLogprobs, PrefixCacheIsNotReadWhileScoringButIsFilled) {
  EngineOptions o;
  o.block_size = 4;
  LLM llm(test::kDemoModel, o);
  const std::vector<int32_t> prompt = llm.encode(kPrompts[0]);
  const auto want = reference_entries(prompt, 4);

  const auto scored = llm.generate({Prompt::from_ids(prompt)}, {scoring(2, 4)});
  expect_matches(scored[0].prompt_logprobs.get(), want, "first");
  EXPECT_EQ(scored[0].metrics.num_cached_tokens, 0);
  const auto plain = llm.generate({Prompt::from_ids(prompt)}, {greedy(2)});
  EXPECT_GT(plain[0].metrics.num_cached_tokens, 0);  // the scoring request's blocks

  const auto again = llm.generate({Prompt::from_ids(prompt)}, {scoring(2, 4)});
  EXPECT_EQ(again[0].metrics.num_cached_tokens, 0);
  expect_matches(again[0].prompt_logprobs.get(), want, "after a cached run");
}

// Only the requests that ask pay the LM head for prompt rows.
TEST(PromptLogprobs, OnlyScoringRequestsGetPromptRows) {
  LLM llm(test::kDemoModel);
  LLMEngine& engine = llm.engine();
  const std::vector<int32_t> a = llm.encode(kPrompts[0]), b = llm.encode(kPrompts[1]);
  engine.add_request("plain", b, greedy(2));
  engine.add_request("scored", a, scoring(2, 1));
  engine.step();  // both prompts in one step
  ASSERT_EQ(engine.last_batch().num_seqs(), 2);
  // One sampling row each, plus one row per scored position but the last.
  EXPECT_EQ(engine.last_batch().logits_indices.size(), 2 + (a.size() - 1));
  engine.step();  // decodes: one row each
  EXPECT_EQ(engine.last_batch().logits_indices.size(), 2u);
  while (engine.has_unfinished()) engine.step();
}

// Scoring requests share a per-step cap on their tokens (each is a logits
// row): their prompts take more steps, other requests are not held back,
// and the entries are the same.
TEST(PromptLogprobs, ScoringCapBoundsTheRowsOfAStep) {
  EngineOptions o;
  o.max_num_scored_prompt_tokens = 5;
  LLM llm(test::kDemoModel, o);
  LLMEngine& engine = llm.engine();
  std::vector<std::vector<int32_t>> prompts;
  for (const std::string& p : kPrompts) prompts.push_back(llm.encode(p));
  engine.add_request("plain", prompts[0], greedy(3));
  for (size_t i = 0; i < prompts.size(); ++i)
    engine.add_request("scored" + std::to_string(i), prompts[i], scoring(3, 2));
  std::vector<RequestOutput> finished;
  bool first_step = true;
  while (engine.has_unfinished()) {
    for (RequestOutput& out : engine.step()) {
      if (out.finished) finished.push_back(std::move(out));
    }
    const BatchMetadata& b = engine.last_batch();
    // At most 5 scored tokens (so at most 5 prompt rows) + one sampling row per sequence.
    EXPECT_LE(b.logits_indices.size(), 5u + static_cast<size_t>(b.num_seqs()));
    if (first_step) {  // the plain prompt is not held back by the cap
      EXPECT_EQ(b.query_start_loc[1], static_cast<int32_t>(prompts[0].size()));
      first_step = false;
    }
  }
  ASSERT_EQ(finished.size(), prompts.size() + 1);
  for (const RequestOutput& out : finished) {
    if (out.request_id == "plain") continue;
    const size_t i = std::stoul(out.request_id.substr(6));
    expect_matches(out.prompt_logprobs.get(), reference_entries(prompts[i], 2), out.request_id);
  }
}

TEST(PromptLogprobs, OneTokenPromptHasNoEntriesAndUnrequestedHasNone) {
  LLM llm(test::kDemoModel);
  const auto outs =
      llm.generate({Prompt::from_ids({1}), Prompt::from_ids({1, 403})}, {scoring(2, 3), greedy(2)});
  ASSERT_NE(outs[0].prompt_logprobs, nullptr);
  EXPECT_EQ(outs[0].prompt_logprobs->size(), 0u);
  EXPECT_EQ(outs[1].prompt_logprobs, nullptr);
  SamplingParams bad = scoring(2, 21);
  EXPECT_THROW(llm.generate({"hi"}, bad), InputError);
}

}  // namespace
}  // namespace pagoda
