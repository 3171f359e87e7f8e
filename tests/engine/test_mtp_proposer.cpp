// The `mtp` proposer (DeepSeek's MTP layer drafts tokens;
// spec_decode/mtp_proposer.h) in the engine, on tiny DeepSeek V3 and V3.2
// checkpoints written by tools/make_deepseek_checkpoint.py --mtp-copy: an
// MTP layer built to mostly predict what the main model will, so steps
// both accept and reject drafts. Greedy output must be token for token the
// output without speculation across mixed batches, chunked prefill,
// preemption and prefix-cache hits, with LLMEngine::check_invariants after
// every step and every block back at the end. (The MTP logits and drafts
// themselves are compared with the numpy reference in
// tests/e2e/test_speculative_decoding.sh.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <span>
#include <random>
#include <string>
#include <vector>

#include "../models/checkpoint_test_util.h"
#include "core/error.h"
#include "engine/llm_engine.h"
#include "engine_test_util.h"
#include "speculative_test_util.h"

namespace pagoda {
namespace {

// The checkpoints, written once per test binary run; `random`: an MTP
// layer of random weights (not --mtp-copy, whose eh_proj ignores the main
// model's hidden state): it reads the hidden states, and its drafts are
// almost never accepted.
struct Checkpoints {
  test::TempDir tmp;
  std::string v3 = (tmp / "v3").string(), v32 = (tmp / "v32").string();
  std::string random = (tmp / "random").string();
  Checkpoints() {
    for (const auto& [dir, flags] : {std::pair{v3, "--mtp-copy 0.05 --arch v3"},
                                     std::pair{v32, "--mtp-copy 0.05 --arch v32"},
                                     std::pair{random, "--arch v3"}}) {
      const std::string write = std::string("/usr/bin/python3 " PAGODA_SOURCE_DIR
                                            "/tools/make_deepseek_checkpoint.py --dtype f32 "
                                            "--seed 3 ") +
                                flags + " --out " + dir + " > /dev/null";
      EXPECT_EQ(std::system(write.c_str()), 0) << write;
    }
  }
};

const Checkpoints& checkpoints() {
  static const Checkpoints c;
  return c;
}

SpeculativeConfig mtp(int k) {
  SpeculativeConfig c;
  c.method = SpeculativeMethod::Mtp;
  c.num_speculative_tokens = k;
  c.adaptive = false;
  return c;
}

std::vector<std::vector<int32_t>> prompts(int n, uint32_t seed) {
  return test::spec::id_prompts(n, seed, 30);
}

std::vector<std::vector<int32_t>> run(LLMEngine& engine, const std::vector<std::vector<int32_t>>& ps,
                                      const std::vector<SamplingParams>& params) {
  return test::spec::run_ids(engine, ps, params);
}

std::vector<std::vector<int32_t>> run(const std::string& model, const EngineOptions& o,
                                      const std::vector<std::vector<int32_t>>& ps,
                                      const std::vector<SamplingParams>& params) {
  LLMEngine engine(model, o);
  return run(engine, ps, params);
}

// Accepted and rejected drafts both happened.
void expect_mixed_acceptance(const LLMEngine& engine) {
  const SpecDecodeStats s = engine.stats().spec_decode;
  EXPECT_GT(s.num_accepted_tokens, 0) << s.num_drafts << " drafts";
  EXPECT_LT(s.num_accepted_tokens, s.num_draft_tokens);
}

std::vector<SamplingParams> mixed_limits(size_t n) {
  std::vector<SamplingParams> params;
  for (size_t i = 0; i < n; ++i) params.push_back(test::greedy(5 + static_cast<int>(i * 7 % 40)));
  return params;
}

TEST(MtpProposer, GreedyEqualsPlainOverAMixedBatchV3AndV32) {
  for (const std::string& model : {checkpoints().v3, checkpoints().v32}) {
    const auto ps = prompts(10, 1);
    const auto params = mixed_limits(ps.size());
    const auto plain = run(model, EngineOptions{}, ps, params);
    for (int k : {1, 3}) {
      EngineOptions o;
      o.speculative_config = mtp(k);
      LLMEngine engine(model, o);
      EXPECT_EQ(run(engine, ps, params), plain) << model << " k " << k;
      expect_mixed_acceptance(engine);
    }
  }
}

TEST(MtpProposer, ChunkedPrefillPreemptionAndSmallBlocksEqualPlain) {
  const auto ps = prompts(10, 2);
  const std::vector<SamplingParams> params = {test::greedy(40)};
  const std::string& model = checkpoints().v3;
  const auto plain = run(model, EngineOptions{}, ps, params);
  EngineOptions o;
  o.max_num_batched_tokens = 7;  // prompt chunks next to 1 + k token verifications
  o.block_size = 4;              // drafts and chains often cross a block
  o.max_model_len = 72;
  // 5 MLA layers (4 + MTP) of (64 + 16) f32 values: 1600 bytes a position;
  // room for 80 positions, about two requests: they are preempted.
  o.kv_cache_memory = 1600 * 80;
  o.speculative_config = mtp(4);
  LLMEngine engine(model, o);
  EXPECT_EQ(run(engine, ps, params), plain);
  EXPECT_GT(engine.stats().num_preemptions, 0);
  expect_mixed_acceptance(engine);
}

TEST(MtpProposer, PrefixCacheHitsEqualPlain) {
  // Second round: each prompt is a first-round prompt plus its output, so
  // it hits blocks whose MTP entries earlier requests computed.
  for (const std::string& model : {checkpoints().v3, checkpoints().v32}) {
    const auto ps = prompts(8, 3);
    EngineOptions o;
    o.block_size = 4;
    o.speculative_config = mtp(3);
    LLMEngine engine(model, o);
    const auto first = run(engine, ps, {test::greedy(24)});
    std::vector<std::vector<int32_t>> second;
    for (size_t i = 0; i < ps.size(); ++i) {
      second.push_back(ps[i]);
      second.back().insert(second.back().end(), first[i].begin(), first[i].end());
    }
    const auto hits_before = engine.stats().prefix_cache_hit_tokens;
    const auto spec = run(engine, second, {test::greedy(16)});
    EngineOptions plain_options;
    plain_options.enable_prefix_caching = false;
    EXPECT_EQ(spec, run(model, plain_options, second, {test::greedy(16)})) << model;
    EXPECT_GT(engine.stats().prefix_cache_hit_tokens - hits_before, 100) << model;
    expect_mixed_acceptance(engine);
  }
}

using test::spec::MtpRecord;

TEST(MtpProposer, PrefixCacheHitsKeepTheMtpLayersEntries) {
  // The MTP entry at a block's last position pairs it with the next token,
  // which the block's hash does not cover: a hit must not reuse an entry
  // computed with another next token (the last hit block is recomputed).
  // Round 2 reuses round 1's prompts with other continuations, so blocks
  // are hit whose successor token differs; its MTP logits at every
  // position it computes, and its drafts, must equal a run without the
  // prefix cache.
  const std::string& model = checkpoints().v3;
  const auto ps = prompts(8, 4);
  std::vector<std::vector<int32_t>> second;
  std::mt19937 rng(9);
  for (const auto& p : ps) {
    second.push_back(p);
    second.back().resize(p.size() - p.size() / 3);  // cut inside or at the end of a block
    for (int j = 0; j < 9; ++j) second.back().push_back(3 + static_cast<int32_t>(rng() % 500));
  }
  EngineOptions o;
  o.block_size = 4;
  o.speculative_config = mtp(3);
  LLMEngine cached(model, o);
  run(cached, ps, {test::greedy(12)});
  const auto hits_before = cached.stats().prefix_cache_hit_tokens;
  MtpRecord with_hits, without;
  with_hits.observe(cached);
  const auto a = run(cached, second, {test::greedy(12)});
  EXPECT_GT(cached.stats().prefix_cache_hit_tokens - hits_before, 20);
  o.enable_prefix_caching = false;
  LLMEngine fresh(model, o);
  without.observe(fresh);
  EXPECT_EQ(run(fresh, second, {test::greedy(12)}), a);
  with_hits.expect_same_as(without);
}

// The MTP layer runs its attention, FFN and head only where a draft is
// taken from it (a drafting request's last position, then one row per
// chained draft): every other position of the catch-up pass (prompt
// chunks, accepted drafts, requests the adaptive switch stopped) only
// writes the layer's cache entry (or defers it). So the rows through the
// block equal the drafts made, and the logits draft 1 is taken from and the
// drafts have the bits of passes that run the whole layer at every
// position as it comes (an observer of every position's logits).
TEST(MtpProposer, OnlyDraftingRowsRunTheBlockPastItsCacheWrite) {
  for (const std::string& model : {checkpoints().v3, checkpoints().v32}) {
    const auto ps = prompts(10, 6);
    const auto params = mixed_limits(ps.size());
    const auto plain = run(model, EngineOptions{}, ps, params);
    EngineOptions o;
    o.max_num_batched_tokens = 9;  // prompts in chunks
    o.block_size = 4;
    o.speculative_config = mtp(3);
    o.speculative_config->adaptive = true;  // some requests stop drafting
    test::spec::expect_only_drafting_rows_run_the_block(model, o, ps, params, plain);
  }
}

// Two engines of the same options: `deferring` records the logits its
// drafts are taken from and its drafts; `keeping_up` records every
// position's logits, so its MTP layer defers nothing. clear() forgets both
// records (the observers stay).
struct DeferringAndKeepingUp {
  LLMEngine deferring, keeping_up;
  MtpRecord deferred, kept_up;
  DeferringAndKeepingUp(const std::string& model, const EngineOptions& o)
      : deferring(model, o), keeping_up(model, o) {
    deferred.observe(deferring, /*every_position=*/false);
    kept_up.observe(keeping_up);
  }
  void clear() {
    deferred = {};
    kept_up = {};
  }
};

// A request that does not draft (prompt chunks, outputs while the adaptive
// switch is off) keeps the target's hidden states instead of running the
// MTP layer each step, and catches up in one pass when it drafts
// (MtpProposer::kMaxDeferredPositions). Over 150 tokens of an MTP layer
// whose drafts are rejected each request stops and probes again; the
// logits its drafts are taken from and the drafts must have the bits of a
// run whose layer keeps up every step (an observer of every position's
// logits defers nothing), and the output must be the plain output.
TEST(MtpProposer, DeferredPositionsCatchUpWhenTheRequestDraftsAgain) {
  const std::string& model = checkpoints().random;
  const auto ps = prompts(4, 8);
  const std::vector<SamplingParams> params = {test::greedy(150)};
  EngineOptions o;
  o.max_num_batched_tokens = 9;  // prompts in chunks
  o.speculative_config = mtp(3);
  o.speculative_config->adaptive = true;
  DeferringAndKeepingUp e(model, o);
  const auto plain = run(model, EngineOptions{}, ps, params);
  EXPECT_EQ(run(e.deferring, ps, params), plain);
  EXPECT_EQ(run(e.keeping_up, ps, params), plain);
  e.deferred.expect_bits_in(e.kept_up);
  // Each request verified drafts after its first 64 steps: a probe.
  std::map<std::string, int64_t> last_probe;
  for (const auto& [key, drafts] : e.deferred.drafts) {
    last_probe[key.first] = std::max(last_probe[key.first], key.second);
  }
  ASSERT_EQ(last_probe.size(), ps.size());
  for (size_t i = 0; i < ps.size(); ++i) {
    EXPECT_GT(last_probe[std::to_string(i)], static_cast<int64_t>(ps[i].size()) + 64)
        << "request " << i << " never probed";
  }
  EXPECT_LT(e.deferring.stats().spec_decode.num_accepted_tokens,
            e.deferring.stats().spec_decode.num_draft_tokens / 4);
}

// Deferral across preemption and prefix-cache hits, on the MTP layer that
// reads the hidden states (the --mtp-copy checkpoints above ignore them,
// so a wrong hidden row would go unseen there): requests that stop
// drafting defer, are preempted (their deferred states dropped and
// recomputed; check_invariants: none kept while waiting) and later hit
// blocks earlier requests cached. The logits drafts are taken from, and
// the drafts, must have the bits of a run whose layer keeps up every step,
// and the outputs must be the plain outputs. (The two runs' steps may
// differ: a deferring request's blocks are cached only up to where its
// layer stands, so a preempted request may find fewer on resuming; the
// drafts are compared where both runs drafted.)
TEST(MtpProposer, DeferredPositionsSurvivePreemptionAndPrefixHits) {
  const std::string& model = checkpoints().random;
  const auto ps = prompts(8, 11);
  const std::vector<SamplingParams> params = {test::greedy(70)};
  EngineOptions o;
  o.max_num_batched_tokens = 7;  // prompt chunks next to 1 + k token verifications
  o.block_size = 4;
  o.max_model_len = 160;
  // 5 MLA layers (4 + MTP) of (64 + 16) f32 values: 1600 bytes a position;
  // room for 240 positions, about two requests: they are preempted.
  o.kv_cache_memory = 1600 * 240;
  o.speculative_config = mtp(3);
  o.speculative_config->adaptive = true;
  DeferringAndKeepingUp e(model, o);
  EngineOptions plain_options;
  plain_options.enable_prefix_caching = false;
  const auto plain = run(model, plain_options, ps, params);
  EXPECT_EQ(run(e.deferring, ps, params), plain);
  EXPECT_EQ(run(e.keeping_up, ps, params), plain);
  EXPECT_GT(e.deferring.stats().num_preemptions, 0);
  EXPECT_GT(e.deferred.num_drafts(), 20);
  e.deferred.expect_bits_in(e.kept_up, /*same_schedule=*/false);
  // Round 2, recorded afresh (request ids repeat): round 1's prompts again
  // with other continuations (hits up to a block whose successor token
  // differs).
  std::vector<std::vector<int32_t>> second;
  std::mt19937 rng(5);
  for (const auto& p : ps) {
    second.push_back(p);
    second.back().resize(p.size() - p.size() / 4);
    for (int j = 0; j < 6; ++j) second.back().push_back(3 + static_cast<int32_t>(rng() % 500));
  }
  const auto hits_before = e.deferring.stats().prefix_cache_hit_tokens;
  const auto want = run(model, plain_options, second, params);
  e.clear();
  EXPECT_EQ(run(e.deferring, second, params), want);
  EXPECT_EQ(run(e.keeping_up, second, params), want);
  EXPECT_GT(e.deferring.stats().prefix_cache_hit_tokens - hits_before, 20);
  EXPECT_GT(e.deferred.num_drafts(), 20);
  e.deferred.expect_bits_in(e.kept_up, /*same_schedule=*/false);
}

// Random pools, budgets, block sizes, k and sampling (greedy and seeded
// temperature): every step's invariants hold and every block returns.
TEST(MtpProposer, RandomizedInvariants) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 4; ++trial) {
    EngineOptions o;
    o.block_size = 1 << (rng() % 4);
    o.max_num_batched_tokens = 4 + static_cast<int32_t>(rng() % 40);
    o.max_model_len = 96;
    o.kv_cache_memory = 1600 * (96 + static_cast<int64_t>(rng() % 300));
    o.speculative_config = mtp(1 + static_cast<int>(rng() % 5));
    o.speculative_config->adaptive = rng() % 2 == 0;
    LLMEngine engine(checkpoints().v3, o);
    const auto ps = prompts(8, 10 + trial);
    const std::vector<SamplingParams> params = test::spec::random_params(rng, ps.size());
    run(engine, ps, params);
  }
}

TEST(MtpProposer, ModelsWithoutAnMtpLayerAreRefused) {
  EngineOptions o;
  o.speculative_config = mtp(2);
  try {
    LLMEngine engine(test::kDemoModel, o);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("MTP layer"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace pagoda
