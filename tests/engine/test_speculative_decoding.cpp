// Speculative decoding in the engine (n-gram proposer): greedy output with
// drafts verified in the step must be token for token the output without
// them, whatever the batch, chunking, preemption, prefix-cache hits, stops
// and limits; rejected drafts must leave no page behind and never reach the
// prefix cache (LLMEngine::check_invariants after every step).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/llm.h"
#include "engine_test_util.h"
#include "speculative_test_util.h"

namespace pagoda {
namespace {

using namespace test::spec;

TEST(SpeculativeDecoding, GreedyNgramEqualsPlainGreedyOverManyPrompts) {
  const auto prompts = many_prompts();
  const auto plain = run(EngineOptions{}, prompts, {test::greedy(96)});
  for (const auto& [k, min_n, max_n] : std::vector<std::tuple<int, int, int>>{
           {1, 1, 1}, {4, 1, 3}, {3, 2, 5}, {8, 1, 4}}) {
    EngineOptions o;
    o.speculative_config = ngram(k, min_n, max_n);
    LLMEngine engine(kModel, o);
    expect_same(run(engine, prompts, {test::greedy(96)}), plain);
    const SpecDecodeStats s = engine.stats().spec_decode;
    // Speculation did happen, with accepted and rejected drafts both.
    EXPECT_GT(s.num_drafts, 50) << "k " << k;
    EXPECT_GT(s.num_accepted_tokens, 0) << "k " << k;
    EXPECT_LT(s.num_accepted_tokens, s.num_draft_tokens) << "k " << k;
    ASSERT_FALSE(s.num_accepted_tokens_per_pos.empty());
    EXPECT_LE(static_cast<int>(s.num_accepted_tokens_per_pos.size()), k);
    int64_t sum = 0;
    for (size_t p = 0; p < s.num_accepted_tokens_per_pos.size(); ++p) {
      sum += s.num_accepted_tokens_per_pos[p];
      if (p > 0) {
        EXPECT_LE(s.num_accepted_tokens_per_pos[p], s.num_accepted_tokens_per_pos[p - 1]);
      }
    }
    EXPECT_EQ(sum, s.num_accepted_tokens);
  }
}

TEST(SpeculativeDecoding, AdaptiveSwitchKeepsOutputAndDraftsLess) {
  const auto prompts = many_prompts();
  const auto plain = run(EngineOptions{}, prompts, {test::greedy(96)});
  EngineOptions always, adaptive;
  always.speculative_config = ngram(4, 1, 2, /*adaptive=*/false);
  adaptive.speculative_config = ngram(4, 1, 2, /*adaptive=*/true);
  LLMEngine a(kModel, always), b(kModel, adaptive);
  expect_same(run(a, prompts, {test::greedy(96)}), plain);
  expect_same(run(b, prompts, {test::greedy(96)}), plain);
  const SpecDecodeStats sa = a.stats().spec_decode, sb = b.stats().spec_decode;
  // Requests below the break-even stop drafting: fewer drafts, each more
  // often accepted.
  EXPECT_LT(sb.num_drafts, sa.num_drafts);
  EXPECT_GT(sb.acceptance_rate(), sa.acceptance_rate());
}

// Per-request processors (penalties, logit_bias, bad words, min_tokens,
// allowed ids) are applied per draft position as plain sampling would, and
// sampled requests share the batch with greedy ones.
TEST(SpeculativeDecoding, MixedBatchWithLogitsProcessorsEqualsPlain) {
  const auto prompts = many_prompts();
  std::vector<SamplingParams> params;
  for (size_t i = 0; i < prompts.size(); ++i) {
    SamplingParams p = test::greedy(40 + static_cast<int>(i) * 3, /*ignore_eos=*/i % 2 == 0);
    switch (i % 8) {
      case 1: p.repetition_penalty = 1.3f; break;
      case 2: p.frequency_penalty = 0.4f; p.presence_penalty = 0.2f; break;
      case 3: p.logit_bias = {{300, 3.0f}, {301, -5.0f}}; break;
      case 4: p.min_tokens = 30; p.ignore_eos = false; break;
      case 5: p.bad_words_token_ids = {{263}, {278, 279}}; break;
      case 6: p.temperature = 0.8f; p.seed = 7 + i; break;  // sampled: not compared
      case 7: p.logprobs = 2; break;
      default: break;
    }
    params.push_back(p);
  }
  const auto plain = run(EngineOptions{}, prompts, params);
  EngineOptions o;
  o.speculative_config = ngram(4, 1, 3);
  const auto spec = run(o, prompts, params);
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (!params[i].greedy()) {
      EXPECT_EQ(spec[i].token_ids.size(), static_cast<size_t>(params[i].max_tokens));
      continue;
    }
    EXPECT_EQ(spec[i].token_ids, plain[i].token_ids) << "prompt " << i;
    EXPECT_EQ(spec[i].finish_reason, plain[i].finish_reason) << "prompt " << i;
    // Logprobs of accepted tokens are the target's (rows of a multi-token
    // pass may round differently from a one-token step: a small tolerance).
    ASSERT_EQ(spec[i].logprobs.size(), plain[i].logprobs.size());
    for (size_t t = 0; t < spec[i].logprobs.size(); ++t) {
      EXPECT_NEAR(spec[i].logprobs[t].logprob, plain[i].logprobs[t].logprob, 1e-4);
      ASSERT_EQ(spec[i].logprobs[t].top_logprobs.size(), 2u);
      EXPECT_EQ(spec[i].logprobs[t].top_logprobs[0].first, plain[i].logprobs[t].top_logprobs[0].first);
    }
  }
}

TEST(SpeculativeDecoding, ChunkedPrefillPreemptionAndSmallBlocksEqualPlain) {
  const auto prompts = many_prompts();
  const auto plain = run(EngineOptions{}, prompts, {test::greedy(48)});
  EngineOptions o;
  o.max_num_batched_tokens = 7;  // chunks of prompts next to 1 + k token decodes
  o.block_size = 4;              // a rejected tail often spans a block
  o.max_model_len = 128;
  // Room for about two sequences: preemption and recomputation.
  o.kv_cache_memory = 5 * 2 * 4 * 8 * 4 * 4 * 36;  // 144 positions of 1280 bytes
  o.speculative_config = ngram(5, 1, 3);
  LLMEngine engine(kModel, o);
  const auto spec = run(engine, prompts, {test::greedy(48)});
  expect_same(spec, plain);
  int64_t preemptions = 0;
  for (const RequestOutput& r : spec) preemptions += r.metrics.num_preemptions;
  EXPECT_GT(preemptions, 0);
  EXPECT_GT(engine.stats().spec_decode.num_accepted_tokens, 0);
}

TEST(SpeculativeDecoding, PrefixCacheHitsAfterSpeculationEqualPlain) {
  // Second round: each prompt is a first-round prompt plus its output, so
  // it hits blocks cached by speculative steps; their K/V must be that of
  // the accepted tokens (a cached rejected draft would change the logits).
  const auto prompts = many_prompts();
  EngineOptions o;
  o.block_size = 4;
  o.speculative_config = ngram(4, 1, 3);
  LLMEngine engine(kModel, o);
  const auto first = run(engine, prompts, {test::greedy(40)});
  std::vector<std::string> second;
  for (size_t i = 0; i < prompts.size(); ++i) second.push_back(prompts[i] + first[i].text);
  const auto spec = run(engine, second, {test::greedy(24)});
  EngineOptions plain_options;
  plain_options.enable_prefix_caching = false;
  const auto plain = run(plain_options, second, {test::greedy(24)});
  expect_same(spec, plain);
  int64_t hits = 0;
  for (const RequestOutput& r : spec) hits += r.metrics.num_cached_tokens;
  EXPECT_GT(hits, 100);
}

TEST(SpeculativeDecoding, StopsInsideAcceptedRunsEndThere) {
  // A repetitive prompt: long accepted runs, which each limit must cut.
  const std::vector<std::string> prompts = {"Tom said hi. Tom said hi. Tom said",
                                            "The cat sat. The cat sat. The cat sat. The cat"};
  const auto reference = run(EngineOptions{}, prompts, {test::greedy(60)});
  EngineOptions o;
  o.speculative_config = ngram(6, 1, 3);
  LLMEngine engine(kModel, o);
  for (int max_tokens = 1; max_tokens <= 20; ++max_tokens) {
    expect_same(run(engine, prompts, {test::greedy(max_tokens)}),
                run(EngineOptions{}, prompts, {test::greedy(max_tokens)}));
  }
  // Stop strings and stop ids taken from the middle of the reference text.
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::string& text = reference[i].text;
    for (size_t at : {size_t{5}, size_t{17}, size_t{40}}) {
      SamplingParams p = test::greedy(60);
      p.stop = {text.substr(at, 4)};
      expect_same(run(engine, {prompts[i]}, {p}), run(EngineOptions{}, {prompts[i]}, {p}));
      SamplingParams q = test::greedy(60);
      q.stop_token_ids = {reference[i].token_ids[at / 3 + 2]};
      expect_same(run(engine, {prompts[i]}, {q}), run(EngineOptions{}, {prompts[i]}, {q}));
    }
  }
  EXPECT_GT(engine.stats().spec_decode.num_accepted_tokens, 0);
}

// Random batches: prompts, limits, arrival times and pool sizes drawn from a
// fixed seed; every step's invariants hold and every block returns.
TEST(SpeculativeDecoding, RandomizedInvariants) {
  std::mt19937 rng(2024);
  const auto pool = many_prompts();
  for (int trial = 0; trial < 6; ++trial) {
    EngineOptions o;
    o.block_size = 1 << (rng() % 4);
    o.max_num_batched_tokens = 4 + static_cast<int32_t>(rng() % 40);
    o.max_model_len = 160;
    o.kv_cache_memory = 5 * 2 * 8 * 4 * 4 * (160 + static_cast<int64_t>(rng() % 400));
    o.speculative_config = ngram(1 + static_cast<int>(rng() % 6), 1, 1 + static_cast<int>(rng() % 3),
                                 rng() % 2 == 0);
    LLMEngine engine(kModel, o);
    run_random_arrivals(engine, pool, rng, trial);
  }
}

// End to end with the model: the 24th output token of seeded sampled
// requests (stories repeat names and phrases, so steps before it verify
// drafts), with and without speculation, is one distribution (two-sample
// chi-square at 0.001; the speculative samples reject a colder sampling's).
TEST(SpeculativeDecoding, SampledTokensFollowThePlainDistribution) {
  EngineOptions spec;
  spec.speculative_config = ngram(4, 1, 3);
  expect_sampled_tokens_follow_the_plain_distribution(spec, 1200);
}

TEST(SpeculativeDecoding, BadConfigsAreRefused) {
  EXPECT_THROW(parse_speculative_config("{"), InputError);
  EXPECT_THROW(parse_speculative_config("[]"), InputError);
  EXPECT_THROW(parse_speculative_config(R"({"method": "ngram"})"), InputError);
  EXPECT_THROW(parse_speculative_config(R"({"method": "eagle", "num_speculative_tokens": 2})"),
               InputError);
  EXPECT_THROW(parse_speculative_config(R"({"method": "ngram", "num_speculative_tokens": 0})"),
               InputError);
  EXPECT_THROW(parse_speculative_config(
                   R"({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 4, "prompt_lookup_max": 2})"),
               InputError);
  EXPECT_THROW(parse_speculative_config(R"({"method": "ngram", "num_speculative_tokens": 2, "foo": 1})"),
               InputError);
  EXPECT_THROW(parse_speculative_config(R"({"method": "draft_model", "num_speculative_tokens": 2})"),
               InputError);
  const SpeculativeConfig c =
      parse_speculative_config(R"({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4})");
  EXPECT_EQ(c.num_speculative_tokens, 3);
  EXPECT_EQ(c.prompt_lookup_min, 4);  // as vLLM: the one given sets the other
  EXPECT_EQ(c.prompt_lookup_max, 4);
  EXPECT_TRUE(c.adaptive);
}

}  // namespace
}  // namespace pagoda
