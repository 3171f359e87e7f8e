// Speculative decoding with a draft model (spec_decode/draft_model_proposer.h):
// the draft is the demo model cut to its first layers
// (tools/cut_checkpoint_layers.py: same tokenizer, own K/V in the target's
// pools). Greedy output must be token for token the output without
// speculation in every batch shape, and with the target itself as the draft
// every greedy draft must be accepted: any K/V of the draft at a wrong
// position, lost in a rollback or taken from a prefix-cache block it never
// computed would show as a rejection.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../models/checkpoint_test_util.h"
#include "engine/llm.h"
#include "engine_test_util.h"
#include "speculative_test_util.h"

namespace pagoda {
namespace {

using namespace test::spec;
namespace fs = std::filesystem;

// The demo model cut to `layers` layers, written once per test binary.
std::string draft_checkpoint(int layers) {
  static const fs::path root = [] {
    std::string tmpl = (fs::temp_directory_path() / "pagoda_draft_test_XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(root, ec);
    });
    return fs::path(tmpl);
  }();
  const fs::path dir = root / ("layers" + std::to_string(layers));
  if (!fs::exists(dir / "config.json")) {
    const std::string cmd = "/usr/bin/python3 " PAGODA_SOURCE_DIR
                            "/tools/cut_checkpoint_layers.py --src " + kModel + " --out " +
                            dir.string() + " --layers " + std::to_string(layers) + " >/dev/null";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  return dir.string();
}

SpeculativeConfig draft(const std::string& model, int k, bool adaptive = false) {
  SpeculativeConfig c;
  c.method = SpeculativeMethod::DraftModel;
  c.model = model;
  c.num_speculative_tokens = k;
  c.adaptive = adaptive;
  return c;
}

// f32 K and V of 4 heads x 8 per layer: the demo model's 5 layers plus the
// draft's own.
int64_t bytes_per_position(int draft_layers) { return (5 + draft_layers) * 2 * 4 * 8 * 4; }

TEST(DraftModelSpeculation, GreedyEqualsPlainGreedyOverManyPrompts) {
  const auto prompts = many_prompts();
  const auto plain = run(EngineOptions{}, prompts, {test::greedy(64)});
  for (const auto& [layers, k] : std::vector<std::pair<int, int>>{{4, 1}, {4, 3}, {3, 5}}) {
    EngineOptions o;
    o.speculative_config = draft(draft_checkpoint(layers), k);
    LLMEngine engine(kModel, o);
    expect_same(run(engine, prompts, {test::greedy(64)}), plain);
    const SpecDecodeStats s = engine.stats().spec_decode;
    // Decode steps verified up to k drafts (fewer near max_tokens); some
    // were accepted, some not.
    EXPECT_GT(s.num_drafts, 200) << "layers " << layers << " k " << k;
    EXPECT_LE(s.num_draft_tokens, s.num_drafts * k);
    EXPECT_GT(s.num_draft_tokens, s.num_drafts * k * 9 / 10);
    EXPECT_GT(s.num_accepted_tokens, 0) << "layers " << layers << " k " << k;
    EXPECT_LT(s.num_accepted_tokens, s.num_draft_tokens) << "layers " << layers << " k " << k;
  }
}

// The draft is the target: its greedy drafts are the target's own greedy
// tokens, so all are accepted (but for a near tie that the differently
// batched passes round apart), through chunked prefill, tiny blocks and
// preemption.
TEST(DraftModelSpeculation, TargetAsDraftAcceptsEveryGreedyDraft) {
  const auto prompts = many_prompts();
  const auto plain = run(EngineOptions{}, prompts, {test::greedy(48)});
  struct Case {
    const char* name;
    int32_t max_num_batched_tokens, block_size;
    int64_t kv_cache_memory;
  };
  for (const Case& c : {Case{"default", 2048, 0, 0}, Case{"chunked", 7, 4, 0},
                        // Room for about one 128-position sequence: preemption.
                        Case{"preempted", 16, 4, 150 * bytes_per_position(5)}}) {
    EngineOptions o;
    o.max_num_batched_tokens = c.max_num_batched_tokens;
    o.block_size = c.block_size;
    o.kv_cache_memory = c.kv_cache_memory;
    o.max_model_len = 128;
    o.speculative_config = draft(kModel, 4);
    LLMEngine engine(kModel, o);
    const auto spec = run(engine, prompts, {test::greedy(48)});
    expect_same(spec, plain);
    const SpecDecodeStats s = engine.stats().spec_decode;
    EXPECT_GT(s.num_draft_tokens, 100) << c.name;
    EXPECT_GE(s.acceptance_rate(), 0.99) << c.name << ": " << s.num_accepted_tokens << " of "
                                         << s.num_draft_tokens;
    if (c.kv_cache_memory > 0) {
      EXPECT_GT(engine.stats().num_preemptions, 0) << c.name;
    }
  }
}

// A second round whose prompts are the first round's prompt + output hits
// blocks cached during speculation: the draft's K/V in them must be its own
// for the accepted tokens, or the target-as-draft would start rejecting.
TEST(DraftModelSpeculation, PrefixCacheHitsServeTheDraftToo) {
  const auto prompts = many_prompts();
  EngineOptions o;
  o.block_size = 4;
  o.speculative_config = draft(kModel, 3);
  LLMEngine engine(kModel, o);
  const auto first = run(engine, prompts, {test::greedy(40)});
  std::vector<std::string> second;
  for (size_t i = 0; i < prompts.size(); ++i) second.push_back(prompts[i] + first[i].text);
  const SpecDecodeStats before = engine.stats().spec_decode;
  const auto spec = run(engine, second, {test::greedy(24)});
  EngineOptions plain_options;
  plain_options.enable_prefix_caching = false;
  expect_same(spec, run(plain_options, second, {test::greedy(24)}));
  int64_t hits = 0;
  for (const RequestOutput& r : spec) hits += r.metrics.num_cached_tokens;
  EXPECT_GT(hits, 300);
  const SpecDecodeStats after = engine.stats().spec_decode;
  const int64_t drafted = after.num_draft_tokens - before.num_draft_tokens;
  const int64_t accepted = after.num_accepted_tokens - before.num_accepted_tokens;
  EXPECT_GT(drafted, 50);
  EXPECT_GE(static_cast<double>(accepted), 0.99 * static_cast<double>(drafted));
}

// The adaptive switch turns a draft as costly as the target off at once
// (break-even 1 + (0.06 + 1) k tokens per step, above the k + 1 a step can
// emit); every 64 steps a probe first feeds the draft the ~64 tokens it
// missed, in one pass: with the target as its own draft, every probe's
// drafts must still be accepted.
TEST(DraftModelSpeculation, SwitchedOffRequestsCatchUpWhenTheyProbe) {
  const auto prompts = many_prompts();
  const auto plain = run(EngineOptions{}, prompts, {test::greedy(200)});
  EngineOptions o;
  o.block_size = 4;
  o.speculative_config = draft(kModel, 2, /*adaptive=*/true);
  LLMEngine engine(kModel, o);
  expect_same(run(engine, prompts, {test::greedy(200)}), plain);
  const SpecDecodeStats s = engine.stats().spec_decode;
  // The first verify step of each request, then a probe at about every 64
  // of its ~199 decode steps.
  EXPECT_GE(s.num_drafts, static_cast<int64_t>(prompts.size()) * 3);
  EXPECT_LE(s.num_drafts, static_cast<int64_t>(prompts.size()) * 5);
  EXPECT_GE(s.acceptance_rate(), 0.99)
      << s.num_accepted_tokens << " of " << s.num_draft_tokens;
}

// A sliding-window draft behind the target (switched off at once, probing
// every 64 steps) catches up over positions whose window pages the target
// alone no longer needs: they must still be the request's own (pages handed
// to another request would give wrong drafts). The demo with a 4-token
// window on every layer as its own draft, a small pool so released pages
// are reused: every probe's drafts must be accepted.
TEST(DraftModelSpeculation, SlidingWindowDraftCatchesUpOverItsOwnPages) {
  test::TempDir tmp;
  const std::string dir = (tmp / "swa").string();
  std::filesystem::create_directories(dir);
  for (const auto& e : std::filesystem::directory_iterator(kModel)) {
    if (e.is_regular_file()) std::filesystem::copy_file(e.path(), dir / e.path().filename());
  }
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(dir + "/config.json"));
  cfg["sliding_window"] = 4;
  std::ofstream(dir + "/config.json") << cfg.dump();
  const auto prompts = many_prompts();
  EngineOptions o;
  o.block_size = 2;
  o.kv_cache_memory = 1280 * 2 * 400;  // target + draft: 2560 B a position
  LLMEngine plain_engine(dir, o);
  const auto plain = run(plain_engine, prompts, {test::greedy(150)});
  o.speculative_config = draft(dir, 2, /*adaptive=*/true);
  LLMEngine engine(dir, o);
  expect_same(run(engine, prompts, {test::greedy(150)}), plain);
  const SpecDecodeStats s = engine.stats().spec_decode;
  EXPECT_GE(s.num_drafts, static_cast<int64_t>(prompts.size()) * 2);
  EXPECT_GE(s.acceptance_rate(), 0.99) << s.num_accepted_tokens << " of " << s.num_draft_tokens;
}

// Requests that do not speculate (sampled with the adaptive switch, limits
// that leave no room, logits processors) share the draft's batch with ones
// that do; greedy ones still equal plain greedy.
TEST(DraftModelSpeculation, MixedBatchEqualsPlain) {
  const auto prompts = many_prompts();
  std::vector<SamplingParams> params;
  for (size_t i = 0; i < prompts.size(); ++i) {
    SamplingParams p = test::greedy(1 + static_cast<int>(i) * 4, /*ignore_eos=*/i % 2 == 0);
    switch (i % 6) {
      case 1: p.repetition_penalty = 1.3f; break;
      case 2: p.logit_bias = {{300, 3.0f}, {301, -5.0f}}; break;
      case 3: p.min_tokens = 10; p.ignore_eos = false; break;
      case 4: p.temperature = 0.8f; p.seed = 7 + i; break;  // sampled: not compared
      case 5: p.logprobs = 2; break;
      default: break;
    }
    params.push_back(p);
  }
  const auto plain = run(EngineOptions{}, prompts, params);
  EngineOptions o;
  o.max_num_batched_tokens = 24;
  o.speculative_config = draft(draft_checkpoint(4), 3, /*adaptive=*/true);
  const auto spec = run(o, prompts, params);
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (!params[i].greedy()) continue;
    EXPECT_EQ(spec[i].token_ids, plain[i].token_ids) << "prompt " << i;
    EXPECT_EQ(spec[i].finish_reason, plain[i].finish_reason) << "prompt " << i;
  }
}

TEST(DraftModelSpeculation, ChunkedPrefillPreemptionAndSmallBlocksEqualPlain) {
  const auto prompts = many_prompts();
  const auto plain = run(EngineOptions{}, prompts, {test::greedy(48)});
  EngineOptions o;
  o.max_num_batched_tokens = 7;
  o.block_size = 4;
  o.max_model_len = 96;
  o.kv_cache_memory = 100 * bytes_per_position(3);  // about one sequence
  o.speculative_config = draft(draft_checkpoint(3), 5);
  LLMEngine engine(kModel, o);
  const auto spec = run(engine, prompts, {test::greedy(48)});
  expect_same(spec, plain);
  EXPECT_GT(engine.stats().num_preemptions, 0);
  EXPECT_GT(engine.stats().spec_decode.num_accepted_tokens, 0);
}

// Random batches, limits, arrivals, block and pool sizes; every step's
// invariants hold (the draft's pages and computed positions included) and
// every block returns.
TEST(DraftModelSpeculation, RandomizedInvariants) {
  std::mt19937 rng(77);
  const auto pool = many_prompts();
  for (int trial = 0; trial < 6; ++trial) {
    const int draft_layers = 1 + static_cast<int>(rng() % 5);
    EngineOptions o;
    o.block_size = 1 << (rng() % 4);
    o.max_num_batched_tokens = 4 + static_cast<int32_t>(rng() % 40);
    o.max_model_len = 160;
    o.kv_cache_memory =
        bytes_per_position(draft_layers) * (170 + static_cast<int64_t>(rng() % 400));
    o.enable_prefix_caching = rng() % 4 != 0;
    o.speculative_config = draft(draft_layers == 5 ? kModel : draft_checkpoint(draft_layers),
                                 1 + static_cast<int>(rng() % 6), rng() % 2 == 0);
    LLMEngine engine(kModel, o);
    run_random_arrivals(engine, pool, rng, trial);
  }
}

// The 24th output token of seeded sampled requests, with a draft model
// (greedy drafts verified as a point mass) and without speculation, is one
// distribution (two-sample chi-square at 0.001), and one a colder sampling
// is not.
TEST(DraftModelSpeculation, SampledTokensFollowThePlainDistribution) {
  EngineOptions spec;
  spec.speculative_config = draft(draft_checkpoint(4), 3);
  expect_sampled_tokens_follow_the_plain_distribution(spec, 1000);
}

TEST(DraftModelSpeculation, ParsesVllmKeys) {
  const SpeculativeConfig c =
      parse_speculative_config(R"({"model": "/some/dir", "num_speculative_tokens": 3})");
  EXPECT_EQ(c.method, SpeculativeMethod::DraftModel);
  EXPECT_EQ(c.model, "/some/dir");
  EXPECT_EQ(c.num_speculative_tokens, 3);
  EXPECT_THROW(parse_speculative_config(
                   R"({"method": "draft_model", "model": "d", "num_speculative_tokens": 2, "prompt_lookup_max": 2})"),
               InputError);
  // A draft that is not a checkpoint: InputError at start-up.
  EngineOptions o;
  o.speculative_config = draft("/nonexistent/draft", 2);
  EXPECT_THROW(LLMEngine(kModel, o), InputError);
}

}  // namespace
}  // namespace pagoda
