// The adaptive switch's break-even (spec_decode/adaptive_speculation.h):
// what a verify step of 1 + k tokens costs in plain decode steps. A dense
// target reads its weights once whatever the tokens; a MoE target reads
// every distinct expert its tokens route to (ops::expected_distinct_experts,
// checked here against simulated routing), so on a MoE checkpoint the
// break-even is higher and a request the dense rule would keep drafting for
// stops.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../models/checkpoint_test_util.h"
#include "engine/llm_engine.h"
#include "engine_test_util.h"
#include "ops/moe.h"
#include "speculative_test_util.h"

namespace pagoda {
namespace {

// Monte Carlo reference: each token picks top_k distinct experts uniformly
// at random; count the experts some token of the step picked.
double simulated_distinct_experts(int experts, int top_k, int tokens, std::mt19937& rng) {
  constexpr int kTrials = 20000;
  std::vector<int> ids(static_cast<size_t>(experts));
  int64_t total = 0;
  for (int trial = 0; trial < kTrials; ++trial) {
    std::vector<bool> used(static_cast<size_t>(experts));
    for (int t = 0; t < tokens; ++t) {
      std::iota(ids.begin(), ids.end(), 0);
      std::shuffle(ids.begin(), ids.end(), rng);
      for (int j = 0; j < top_k; ++j) used[static_cast<size_t>(ids[static_cast<size_t>(j)])] = true;
    }
    total += std::count(used.begin(), used.end(), true);
  }
  return static_cast<double>(total) / kTrials;
}

TEST(ExpectedDistinctExperts, MatchesSimulatedRouting) {
  std::mt19937 rng(5);
  struct Case {
    int experts, top_k;
  };
  for (const Case c : {Case{8, 2}, Case{8, 1}, Case{64, 8}, Case{256, 8}}) {
    double last = 0;
    for (int tokens = 1; tokens <= 5; ++tokens) {
      const double want = simulated_distinct_experts(c.experts, c.top_k, tokens, rng);
      const double got = ops::expected_distinct_experts(c.experts, c.top_k, tokens);
      // The simulated mean's standard error is below 0.02 experts here.
      EXPECT_NEAR(got, want, 0.06) << c.experts << " experts, top " << c.top_k << ", " << tokens
                                   << " tokens";
      EXPECT_GT(got, last);  // more tokens, more experts
      EXPECT_LE(got, c.experts);
      last = got;
    }
    EXPECT_DOUBLE_EQ(ops::expected_distinct_experts(c.experts, c.top_k, 1), c.top_k);
  }
}

// A dense model's verify step reads its weights once: the break-even is
// the row cost alone, 1 + 0.06 k (n-gram drafts cost nothing).
TEST(AdaptiveSpeculation, DenseTargetBreakEvenIsTheRowCost) {
  EngineOptions o;
  o.speculative_config = test::spec::ngram(4, 1, 2, /*adaptive=*/true);
  LLMEngine engine(test::kDemoModel, o);
  for (int32_t k = 0; k <= 4; ++k) {
    EXPECT_DOUBLE_EQ(engine.model().expected_weight_bytes_per_step(k + 1),
                     static_cast<double>(engine.model().weight_bytes_per_step()));
    EXPECT_NEAR(engine.speculation_break_even(k), 1 + 0.06 * k, 1e-12) << k;
  }
}

// Tiny DeepSeek V3 checkpoints with an MTP layer that mostly copies the
// main model (tools/make_deepseek_checkpoint.py --mtp-copy).
struct MoeCheckpoint {
  test::TempDir tmp;
  std::string dir = (tmp / "v3").string();
  nlohmann::json config;
  MoeCheckpoint() {
    const std::string write = std::string("/usr/bin/python3 " PAGODA_SOURCE_DIR
                                          "/tools/make_deepseek_checkpoint.py --dtype f32 "
                                          "--seed 3 --mtp-copy 0.05 --moe-inter 512 --out ") +
                              dir + " > /dev/null";
    EXPECT_EQ(std::system(write.c_str()), 0) << write;
    std::ifstream in(dir + "/config.json");
    config = nlohmann::json::parse(in);
  }
};

const MoeCheckpoint& moe_checkpoint() {
  static const MoeCheckpoint c;
  return c;
}

SpeculativeConfig mtp(int k, bool adaptive) {
  SpeculativeConfig c;
  c.method = SpeculativeMethod::Mtp;
  c.num_speculative_tokens = k;
  c.adaptive = adaptive;
  return c;
}

// Random prompts of 8 to 24 ids, each repeating a short period.
std::vector<std::vector<int32_t>> periodic_prompts(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> base(2 + rng() % 4), p(8 + rng() % 17);
    for (int32_t& t : base) t = 3 + static_cast<int32_t>(rng() % 500);
    for (size_t j = 0; j < p.size(); ++j) p[j] = base[j % base.size()];
    out.push_back(p);
  }
  return out;
}

// Greedy outputs in prompt order, the engine's invariants checked each step.
std::vector<std::vector<int32_t>> run_greedy(LLMEngine& engine,
                                             const std::vector<std::vector<int32_t>>& ps,
                                             int max_tokens) {
  return test::spec::run_ids(engine, ps, {test::greedy(max_tokens)});
}

// The verify step's bytes, from config.json: a plain step's plus, in each
// MoE layer, the experts beyond top_k that 1 + k tokens are expected to
// route to, each gate + up + down ([moe_inter, hidden] x 2 + [hidden,
// moe_inter], f32).
TEST(AdaptiveSpeculation, MoeVerifyStepReadsTheExpertsItsTokensRouteTo) {
  const nlohmann::json& c = moe_checkpoint().config;
  EngineOptions o;
  o.speculative_config = mtp(4, true);
  LLMEngine engine(moe_checkpoint().dir, o);
  const int experts = c["n_routed_experts"], top_k = c["num_experts_per_tok"];
  const int64_t moe_layers =
      c["num_hidden_layers"].get<int64_t>() - c["first_k_dense_replace"].get<int64_t>();
  ASSERT_EQ(c["moe_layer_freq"].get<int>(), 1);
  const double expert_bytes =
      3.0 * c["hidden_size"].get<double>() * c["moe_intermediate_size"].get<double>() * 4;
  const double plain = static_cast<double>(engine.model().weight_bytes_per_step());
  double last = 0;
  for (int32_t k = 0; k <= 4; ++k) {
    const double bytes =
        plain + moe_layers * (ops::expected_distinct_experts(experts, top_k, k + 1) - top_k) *
                    expert_bytes;
    EXPECT_NEAR(engine.model().expected_weight_bytes_per_step(k + 1), bytes, 1e-6 * bytes) << k;
    const double mtp_cost = static_cast<double>(engine.model().mtp_weight_bytes_per_step()) / plain;
    const double want = bytes / plain + (0.06 + mtp_cost) * k;
    EXPECT_NEAR(engine.speculation_break_even(k), want, 1e-9) << k;
    // Above the dense rule, by more the more tokens verify.
    const double dense = 1 + (0.06 + mtp_cost) * k;
    EXPECT_GE(engine.speculation_break_even(k) - dense, last) << k;
    last = engine.speculation_break_even(k) - dense;
  }
  EXPECT_GT(last, 0.3) << "5 tokens read ~3.5 more experts in each of " << moe_layers
                       << " layers";
}

// DeepSeek V4 (every layer MoE, tools/make_deepseek_v4_checkpoint.py, f32
// experts): the same rule over all its layers.
TEST(AdaptiveSpeculation, V4VerifyStepReadsTheExpertsItsTokensRouteTo) {
  test::TempDir tmp;
  const std::string dir = (tmp / "v4").string();
  const std::string write = std::string("/usr/bin/python3 " PAGODA_SOURCE_DIR
                                        "/tools/make_deepseek_v4_checkpoint.py --dtype f32 "
                                        "--out ") +
                            dir + " > /dev/null";
  ASSERT_EQ(std::system(write.c_str()), 0) << write;
  std::ifstream in(dir + "/config.json");
  const nlohmann::json c = nlohmann::json::parse(in);
  EngineOptions o;
  o.speculative_config = mtp(3, true);
  LLMEngine engine(dir, o);
  const int experts = c["n_routed_experts"], top_k = c["num_experts_per_tok"];
  const double layers = c["num_hidden_layers"].get<double>();
  const double expert_bytes =
      3.0 * c["hidden_size"].get<double>() * c["moe_intermediate_size"].get<double>() * 4;
  const double plain = static_cast<double>(engine.model().weight_bytes_per_step());
  for (int32_t k = 0; k <= 3; ++k) {
    const double bytes =
        plain + layers * (ops::expected_distinct_experts(experts, top_k, k + 1) - top_k) *
                    expert_bytes;
    EXPECT_NEAR(engine.model().expected_weight_bytes_per_step(k + 1), bytes, 1e-6 * bytes) << k;
  }
  EXPECT_GT(engine.model().expected_weight_bytes_per_step(4), plain * 1.05);
}

// The switch-off decision on the MoE checkpoint: greedy requests whose
// measured tokens per verify step lie between the dense rule's break-even
// and the MoE one (the checkpoint's experts are most of its bytes: 512-wide).
// With the MoE cost they stop drafting after a few verify steps; the dense
// rule keeps drafting longer (39 verify steps of 83 against 13 when this was
// written). The output stays the plain output either way.
TEST(AdaptiveSpeculation, MoeTargetStopsDraftingWhereTheDenseRuleWouldNot) {
  const int k = 3;
  const auto ps = periodic_prompts(6, 11);
  const int max_tokens = 40;
  EngineOptions always, adaptive, plain;
  always.speculative_config = mtp(k, false);
  adaptive.speculative_config = mtp(k, true);
  LLMEngine without(moe_checkpoint().dir, plain), with_drafts(moe_checkpoint().dir, always);
  const auto want = run_greedy(without, ps, max_tokens);
  EXPECT_EQ(run_greedy(with_drafts, ps, max_tokens), want);
  // Tokens per verify step when every step drafts.
  const SpecDecodeStats s = with_drafts.stats().spec_decode;
  ASSERT_GT(s.num_drafts, 0);
  const double tokens_per_step =
      1 + static_cast<double>(s.num_accepted_tokens) / static_cast<double>(s.num_drafts);
  const double mtp_cost = static_cast<double>(with_drafts.model().mtp_weight_bytes_per_step()) /
                          static_cast<double>(with_drafts.model().weight_bytes_per_step());
  const double dense_break_even = 1 + (0.06 + mtp_cost) * k;
  ASSERT_GT(tokens_per_step, dense_break_even + 0.1) << "the dense rule would keep drafting";
  EXPECT_LT(tokens_per_step, with_drafts.speculation_break_even(k) - 0.1)
      << "drafts pay even on the MoE target";

  LLMEngine switched(moe_checkpoint().dir, adaptive);
  EXPECT_EQ(run_greedy(switched, ps, max_tokens), want);
  // The moving average starts half a token above the break-even and moves
  // 0.3 of the way to each step's tokens: at ~2.8 tokens a step it falls
  // under the MoE break-even within a few verify steps, and a request then
  // probes only after 64 steps (past its 40 tokens).
  EXPECT_LE(switched.stats().spec_decode.num_drafts, 3 * static_cast<int64_t>(ps.size()))
      << "verify steps, of " << s.num_drafts << " when every step drafts";
}

}  // namespace
}  // namespace pagoda
