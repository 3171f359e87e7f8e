// Speculative decoding on DeepSeek V4 (compressed KV caches: c4a with the
// indexer's keys, a non-overlapping ratio, sliding windows, compressor
// states), on the tiny random checkpoint of tools/make_deepseek_v4_checkpoint.py
// (window 16, ratios 4 and 16: drafts often complete an entry or cross a
// window page). Rollback needs no mechanism of its own (llm_engine.cpp):
// every cache is indexed by position and a rejected draft's rows and
// entries are rewritten before any query reads them. These tests hold the
// engine to that: greedy output with the n-gram and draft-model proposers
// is token for token the output without speculation across mixed batches,
// chunked prefill, preemption and prefix-cache hits, with
// LLMEngine::check_invariants after every step and every block back.
// The same for the `mtp` proposer (V4's MTP block, spec §3.2.7) on a
// checkpoint written with --mtp-copy (an MTP block built to mostly predict
// the main model, so drafts are accepted and rejected); its logits and
// drafts are compared with the numpy reference in
// tests/e2e/test_speculative_decoding.sh.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <span>
#include <random>
#include <string>
#include <vector>

#include "../models/checkpoint_test_util.h"
#include "engine/llm_engine.h"
#include "engine_test_util.h"
#include "speculative_test_util.h"

namespace pagoda {
namespace {

// The checkpoints, written once per test binary run: the V4 model, a cut
// of it (its first 3 layers and the head) as a draft, and one whose MTP
// block mostly agrees with the main model.
struct Checkpoints {
  test::TempDir tmp;
  std::string v4 = (tmp / "v4").string(), cut = (tmp / "v4_cut").string(),
              mtp = (tmp / "v4_mtp").string();
  Checkpoints() {
    const std::string write = "/usr/bin/python3 " PAGODA_SOURCE_DIR
                              "/tools/make_deepseek_v4_checkpoint.py --dtype f32 ";
    for (const std::string& cmd :
         {write + "--seed 5 --out " + v4, write + "--seed 5 --compress-ratios 0,4,16,0 --out " + cut,
          write + "--seed 3 --mtp-copy 0.05 --out " + mtp}) {
      EXPECT_EQ(std::system((cmd + " > /dev/null").c_str()), 0) << cmd;
    }
  }
};

const Checkpoints& checkpoints() {
  static const Checkpoints c;
  return c;
}

SpeculativeConfig ngram(int k) {
  SpeculativeConfig c;
  c.method = SpeculativeMethod::Ngram;
  c.num_speculative_tokens = k;
  c.prompt_lookup_min = 1;
  c.prompt_lookup_max = 3;
  c.adaptive = false;
  return c;
}

SpeculativeConfig mtp(int k) {
  SpeculativeConfig c;
  c.method = SpeculativeMethod::Mtp;
  c.num_speculative_tokens = k;
  c.adaptive = false;
  return c;
}

SpeculativeConfig draft(const std::string& model, int k) {
  SpeculativeConfig c;
  c.method = SpeculativeMethod::DraftModel;
  c.model = model;
  c.num_speculative_tokens = k;
  c.adaptive = false;
  return c;
}

std::vector<std::vector<int32_t>> prompts(int n, uint32_t seed) {
  return test::spec::id_prompts(n, seed, 40);
}

std::vector<std::vector<int32_t>> run(LLMEngine& engine, const std::vector<std::vector<int32_t>>& ps,
                                      const std::vector<SamplingParams>& params) {
  return test::spec::run_ids(engine, ps, params);
}

std::vector<std::vector<int32_t>> run(const EngineOptions& o,
                                      const std::vector<std::vector<int32_t>>& ps,
                                      const std::vector<SamplingParams>& params,
                                      const std::string& model = checkpoints().v4) {
  LLMEngine engine(model, o);
  return run(engine, ps, params);
}

// Accepted and rejected drafts both happened, enough rejected ones to have
// rolled back across entries and pages. (Random weights rarely repeat
// their context: the n-gram proposer's drafts are mostly rejected, about
// 5% accepted; the 3-layer cut's about 12%.)
void expect_mixed_acceptance(const LLMEngine& engine) {
  const SpecDecodeStats s = engine.stats().spec_decode;
  EXPECT_GT(s.num_accepted_tokens, 0) << s.num_drafts << " drafts";
  EXPECT_GT(s.num_draft_tokens - s.num_accepted_tokens, 20) << s.num_drafts << " drafts";
}

std::vector<SamplingParams> mixed_limits(size_t n) {
  std::vector<SamplingParams> params;
  for (size_t i = 0; i < n; ++i) params.push_back(test::greedy(24 + static_cast<int>(i * 7 % 56)));
  return params;
}

TEST(V4Speculation, GreedyEqualsPlainOverAMixedBatch) {
  const auto ps = prompts(10, 1);
  const auto params = mixed_limits(ps.size());
  const auto plain = run(EngineOptions{}, ps, params);
  // The adaptive switch turns the cut's drafts off for most requests: the
  // draft then keeps feeding their tokens (its sliding windows).
  SpeculativeConfig adaptive = draft(checkpoints().cut, 3);
  adaptive.adaptive = true;
  for (const SpeculativeConfig& c :
       {ngram(2), ngram(5), draft(checkpoints().cut, 3), adaptive, draft(checkpoints().v4, 4)}) {
    EngineOptions o;
    o.speculative_config = c;
    LLMEngine engine(checkpoints().v4, o);
    EXPECT_EQ(run(engine, ps, params), plain) << c.model << " k " << c.num_speculative_tokens;
    if (c.model == checkpoints().v4) {  // the target as its own draft: all accepted
      const SpecDecodeStats s = engine.stats().spec_decode;
      EXPECT_EQ(s.num_accepted_tokens, s.num_draft_tokens);
      EXPECT_GT(s.num_accepted_tokens, 100);
    } else {
      expect_mixed_acceptance(engine);
    }
  }
}

TEST(V4Speculation, ChunkedPrefillPreemptionAndSmallBlocksEqualPlain) {
  const auto ps = prompts(10, 2);
  const std::vector<SamplingParams> params = {test::greedy(48)};
  const auto plain = run(EngineOptions{}, ps, params);
  for (const SpeculativeConfig& c : {ngram(4), draft(checkpoints().cut, 4)}) {
    EngineOptions o;
    o.max_num_batched_tokens = 7;  // prompt chunks next to 1 + k token verifications
    o.block_size = 64;             // the smallest V4 block (64-position window pages)
    o.max_model_len = 96;
    o.speculative_config = c;
    // A pool for one full-length sequence: requests are preempted.
    {
      LLMEngine probe(checkpoints().v4, o);
      o.kv_cache_memory = probe.kv_cache().plan().reserved_bytes_per_sequence(96);
    }
    LLMEngine engine(checkpoints().v4, o);
    EXPECT_EQ(run(engine, ps, params), plain) << c.model;
    EXPECT_GT(engine.stats().num_preemptions, 0) << c.model;
    expect_mixed_acceptance(engine);
  }
}

TEST(V4Speculation, PrefixCacheHitsEqualPlain) {
  // Second round: each prompt is a first-round prompt plus its output, so
  // it hits blocks whose entries (and the draft's) earlier requests wrote
  // while they verified drafts.
  const auto ps = prompts(8, 3);
  for (const SpeculativeConfig& c : {ngram(3), draft(checkpoints().cut, 3)}) {
    EngineOptions o;
    o.block_size = 64;
    o.speculative_config = c;
    LLMEngine engine(checkpoints().v4, o);
    const auto first = run(engine, ps, {test::greedy(40)});
    std::vector<std::vector<int32_t>> second;
    for (size_t i = 0; i < ps.size(); ++i) {
      second.push_back(ps[i]);
      second.back().insert(second.back().end(), first[i].begin(), first[i].end());
    }
    const auto hits_before = engine.stats().prefix_cache_hit_tokens;
    const auto spec = run(engine, second, {test::greedy(24)});
    EngineOptions plain_options;
    plain_options.enable_prefix_caching = false;
    EXPECT_EQ(spec, run(plain_options, second, {test::greedy(24)})) << c.model;
    EXPECT_GT(engine.stats().prefix_cache_hit_tokens - hits_before, 100) << c.model;
    expect_mixed_acceptance(engine);
  }
}

// Random pools, budgets, block sizes, k, proposers and sampling (greedy
// and seeded temperature): every step's invariants hold and every block
// returns.
TEST(V4Speculation, RandomizedInvariants) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 4; ++trial) {
    EngineOptions o;
    o.block_size = 64 << (rng() % 3);
    o.max_num_batched_tokens = 4 + static_cast<int32_t>(rng() % 40);
    o.max_model_len = 96;
    const int k = 1 + static_cast<int>(rng() % 5);
    o.speculative_config = trial % 2 ? ngram(k) : draft(checkpoints().cut, k);
    o.speculative_config->adaptive = rng() % 2 == 0;
    {
      LLMEngine probe(checkpoints().v4, o);
      o.kv_cache_memory = probe.kv_cache().plan().reserved_bytes_per_sequence(96) *
                          (1 + static_cast<int64_t>(rng() % 4));
    }
    LLMEngine engine(checkpoints().v4, o);
    const auto ps = prompts(8, 10 + trial);
    const std::vector<SamplingParams> params = test::spec::random_params(rng, ps.size());
    run(engine, ps, params);
  }
}

TEST(V4Mtp, GreedyEqualsPlainOverAMixedBatch) {
  const std::string& model = checkpoints().mtp;
  const auto ps = prompts(10, 4);
  const auto params = mixed_limits(ps.size());
  const auto plain = run(EngineOptions{}, ps, params, model);
  for (int k : {1, 3}) {
    EngineOptions o;
    o.speculative_config = mtp(k);
    LLMEngine engine(model, o);
    EXPECT_EQ(run(engine, ps, params), plain) << "k " << k;
    const SpecDecodeStats s = engine.stats().spec_decode;
    EXPECT_GT(s.num_accepted_tokens, 50) << s.num_drafts << " drafts";
    EXPECT_GT(s.num_draft_tokens - s.num_accepted_tokens, 20) << s.num_drafts << " drafts";
  }
}

TEST(V4Mtp, ChunkedPrefillPreemptionAndSmallBlocksEqualPlain) {
  const std::string& model = checkpoints().mtp;
  const auto ps = prompts(10, 5);
  const std::vector<SamplingParams> params = {test::greedy(48)};
  const auto plain = run(EngineOptions{}, ps, params, model);
  EngineOptions o;
  o.max_num_batched_tokens = 7;
  o.block_size = 64;
  o.max_model_len = 96;
  o.speculative_config = mtp(4);
  {
    LLMEngine probe(model, o);
    o.kv_cache_memory = probe.kv_cache().plan().reserved_bytes_per_sequence(96);
  }
  LLMEngine engine(model, o);
  EXPECT_EQ(run(engine, ps, params), plain);
  EXPECT_GT(engine.stats().num_preemptions, 0);
  expect_mixed_acceptance(engine);
}

using test::spec::MtpRecord;

TEST(V4Mtp, PrefixCacheHitsEqualPlainAndKeepTheBlocksEntries) {
  // Round 2 reuses round 1's prompts cut inside or at the end of a block
  // and continued otherwise: blocks are hit whose successor token differs
  // (the last hit block is recomputed). Its output, MTP logits at every
  // position it computes and drafts equal a run without the prefix cache.
  const std::string& model = checkpoints().mtp;
  std::mt19937 rng(9);
  std::vector<std::vector<int32_t>> first, second;
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> p(200 + rng() % 60);
    for (int32_t& t : p) t = 3 + static_cast<int32_t>(rng() % 500);
    first.push_back(p);
    p.resize(p.size() - p.size() / 4);
    for (int j = 0; j < 9; ++j) p.push_back(3 + static_cast<int32_t>(rng() % 500));
    second.push_back(p);
  }
  EngineOptions o;
  o.block_size = 64;
  o.speculative_config = mtp(3);
  LLMEngine cached(model, o);
  run(cached, first, {test::greedy(12)});
  const auto hits_before = cached.stats().prefix_cache_hit_tokens;
  MtpRecord with_hits, without;
  with_hits.observe(cached);
  const auto a = run(cached, second, {test::greedy(16)});
  EXPECT_GT(cached.stats().prefix_cache_hit_tokens - hits_before, 100);
  o.enable_prefix_caching = false;
  LLMEngine fresh(model, o);
  without.observe(fresh);
  EXPECT_EQ(run(fresh, second, {test::greedy(16)}), a);
  EngineOptions plain_options;
  plain_options.enable_prefix_caching = false;
  EXPECT_EQ(run(plain_options, second, {test::greedy(16)}, model), a);
  with_hits.expect_same_as(without);
}

// As MtpProposer.OnlyDraftingRowsRunTheBlockPastItsCacheWrite: positions
// without a draft only write the MTP block's window entry.
TEST(V4Mtp, OnlyDraftingRowsRunTheBlockPastItsCacheWrite) {
  const std::string& model = checkpoints().mtp;
  const auto ps = prompts(10, 6);
  const auto params = mixed_limits(ps.size());
  const auto plain = run(EngineOptions{}, ps, params, model);
  EngineOptions o;
  o.max_num_batched_tokens = 9;  // prompts in chunks
  o.block_size = 64;
  o.speculative_config = mtp(3);
  o.speculative_config->adaptive = true;  // some requests stop drafting
  test::spec::expect_only_drafting_rows_run_the_block(model, o, ps, params, plain);
}

TEST(V4Mtp, RandomizedInvariants) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 3; ++trial) {
    EngineOptions o;
    o.block_size = 64 << (rng() % 3);
    o.max_num_batched_tokens = 4 + static_cast<int32_t>(rng() % 40);
    o.max_model_len = 96;
    o.speculative_config = mtp(1 + static_cast<int>(rng() % 5));
    o.speculative_config->adaptive = rng() % 2 == 0;
    {
      LLMEngine probe(checkpoints().mtp, o);
      o.kv_cache_memory = probe.kv_cache().plan().reserved_bytes_per_sequence(96) *
                          (1 + static_cast<int64_t>(rng() % 4));
    }
    LLMEngine engine(checkpoints().mtp, o);
    const auto ps = prompts(8, 20 + trial);
    const std::vector<SamplingParams> params = test::spec::random_params(rng, ps.size());
    run(engine, ps, params);
  }
}

}  // namespace
}  // namespace pagoda
