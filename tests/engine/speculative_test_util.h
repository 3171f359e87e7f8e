// Shared by the speculative decoding tests (n-gram, draft-model and MTP
// proposers): prompts, step-by-step runners that checks the engine's
// invariants after every step, output comparison and a two-sample
// chi-square test.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/llm_engine.h"
#include "engine/spec_decode/mtp_proposer.h"
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

// Prompts of token ids: n of them, the first of one id, the others of 2
// to max_len ids, every other one repeating a short period (so drafts are
// accepted: the n-gram proposer finds matches, random weights often loop).
inline std::vector<std::vector<int32_t>> id_prompts(int n, uint32_t seed, int max_len) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < n; ++i) {
    const int len = i == 0 ? 1 : 2 + static_cast<int>(rng() % static_cast<uint32_t>(max_len - 1));
    std::vector<int32_t> base(1 + rng() % 5);
    for (int32_t& t : base) t = 3 + static_cast<int32_t>(rng() % 500);
    std::vector<int32_t> p;
    for (int j = 0; j < len; ++j) {
      p.push_back(i % 2 ? base[j % base.size()] : 3 + static_cast<int32_t>(rng() % 500));
    }
    out.push_back(p);
  }
  return out;
}

// Runs prompts of ids to the end step by step (params: one for all, or one
// per prompt), checking the engine's invariants after each step and that
// every block returns; the output ids in prompt order.
inline std::vector<std::vector<int32_t>> run_ids(LLMEngine& engine,
                                                 const std::vector<std::vector<int32_t>>& ps,
                                                 const std::vector<SamplingParams>& params) {
  std::vector<std::vector<int32_t>> out(ps.size());
  for (size_t i = 0; i < ps.size(); ++i) {
    engine.add_request(std::to_string(i), ps[i], params[params.size() == 1 ? 0 : i]);
  }
  while (engine.has_unfinished()) {
    for (RequestOutput& o : engine.step()) {
      if (o.finished) out[std::stoul(o.request_id)] = o.token_ids;
    }
    engine.check_invariants();
  }
  EXPECT_EQ(engine.num_free_kv_blocks(), engine.num_kv_blocks()) << "a block leaked";
  return out;
}

// What the MTP layer computed in a run: its logits per (request,
// position) and its drafts per (request, tokens so far).
struct MtpRecord {
  std::map<std::pair<std::string, int64_t>, std::vector<float>> logits;
  std::map<std::pair<std::string, int64_t>, std::vector<int32_t>> drafts;
  // every_position: the logits at every position (the MTP passes then run
  // the whole layer over every position as it comes); otherwise only
  // where draft 1 is taken from.
  void observe(LLMEngine& engine, bool every_position = true) {
    MtpProposer::Observer o;
    auto record = [this](const std::string& id, int64_t pos, const float* row, int64_t vocab) {
      logits[{id, pos}].assign(row, row + vocab);
    };
    (every_position ? o.logits : o.draft_logits) = record;
    o.drafts = [this](const std::string& id, int64_t n, std::span<const int32_t> d) {
      drafts[{id, n}].assign(d.begin(), d.end());
    };
    engine.set_mtp_observer(std::move(o));
  }
  int64_t num_drafts() const {
    int64_t n = 0;
    for (const auto& [key, d] : drafts) n += static_cast<int64_t>(d.size());
    return n;
  }
  // Every logits row here is in `other` with the same bits, and so are the
  // drafts: all of them, or (same_schedule false: runs whose steps may
  // differ, e.g. where preemptions fall) those made at the same position
  // in both.
  void expect_bits_in(const MtpRecord& other, bool same_schedule = true) const {
    ASSERT_FALSE(logits.empty());
    for (const auto& [key, row] : logits) {
      const auto it = other.logits.find(key);
      ASSERT_NE(it, other.logits.end()) << key.first << " position " << key.second;
      EXPECT_EQ(row, it->second) << "request " << key.first << " position " << key.second;
    }
    if (same_schedule) {
      EXPECT_EQ(drafts, other.drafts);
      return;
    }
    int64_t common = 0;
    for (const auto& [key, d] : drafts) {
      const auto it = other.drafts.find(key);
      if (it == other.drafts.end()) continue;
      ++common;
      EXPECT_EQ(d, it->second) << "request " << key.first << " at " << key.second << " tokens";
    }
    EXPECT_GT(common, static_cast<int64_t>(drafts.size()) / 2);
  }
  // Every logits row here is in `other` (equal within 1e-5 of its largest
  // magnitude), and so are the drafts.
  void expect_same_as(const MtpRecord& other) const {
    ASSERT_FALSE(logits.empty());
    for (const auto& [key, row] : logits) {
      const auto it = other.logits.find(key);
      ASSERT_NE(it, other.logits.end()) << key.first << " position " << key.second;
      float max_abs = 0, max_diff = 0;
      for (size_t v = 0; v < row.size(); ++v) {
        max_abs = std::max(max_abs, std::abs(it->second[v]));
        max_diff = std::max(max_diff, std::abs(row[v] - it->second[v]));
      }
      EXPECT_LE(max_diff, 1e-5f * max_abs) << "request " << key.first << " position " << key.second;
    }
    EXPECT_EQ(drafts, other.drafts);
  }
};

// OnlyDraftingRowsRunTheBlockPastItsCacheWrite (V3, V3.2, V4): with the
// options `o` (adaptive, prompts in chunks), the MTP rows run through the
// block past its cache write equal the drafts made, the outputs are the
// plain ones, and the logits and drafts have the bits of a run that
// computes every position's logits (which runs the block over every row).
inline void expect_only_drafting_rows_run_the_block(
    const std::string& model, const EngineOptions& o,
    const std::vector<std::vector<int32_t>>& prompts, const std::vector<SamplingParams>& params,
    const std::vector<std::vector<int32_t>>& plain) {
  MtpRecord drafts_only, every_row;
  LLMEngine engine(model, o), full(model, o);
  drafts_only.observe(engine, /*every_position=*/false);
  every_row.observe(full);
  EXPECT_EQ(run_ids(engine, prompts, params), plain) << model;
  EXPECT_EQ(run_ids(full, prompts, params), plain) << model;
  EXPECT_GT(drafts_only.num_drafts(), 50) << model;
  EXPECT_EQ(engine.model().mtp_output_rows(), drafts_only.num_drafts()) << model;
  // The catch-up passes computed every prompt and output position besides.
  EXPECT_GT(full.model().mtp_output_rows(), engine.model().mtp_output_rows() + 200) << model;
  drafts_only.expect_bits_in(every_row);
}

// n sampling parameters for randomized runs: greedy with 1 to 50 tokens,
// about a third sampled at temperature 0.8 with a seed.
template <typename Rng>
std::vector<SamplingParams> random_params(Rng& rng, size_t n) {
  std::vector<SamplingParams> params;
  for (size_t i = 0; i < n; ++i) {
    SamplingParams p = test::greedy(1 + static_cast<int>(rng() % 50));
    if (rng() % 3 == 0) {
      p.temperature = 0.8f;
      p.seed = rng();
    }
    params.push_back(p);
  }
  return params;
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


// One randomized trial: 10 prompts from `pool` with random limits (a third
// sampled), half added at once and the rest between steps at random; the
// engine's invariants hold after every step and every block returns.
inline void run_random_arrivals(LLMEngine& engine, const std::vector<std::string>& pool,
                                std::mt19937& rng, int trial) {
  std::vector<std::string> prompts;
  std::vector<SamplingParams> params;
  for (int i = 0; i < 10; ++i) {
    prompts.push_back(pool[rng() % pool.size()]);
    SamplingParams p = test::greedy(1 + static_cast<int>(rng() % 80), rng() % 2 == 0);
    if (rng() % 3 == 0) {
      p.temperature = 0.7f;
      p.seed = rng();
    }
    params.push_back(p);
  }
  for (size_t i = 0; i < 5; ++i)
    engine.add_request(std::to_string(i), engine.tokenizer().encode(prompts[i], true), params[i]);
  size_t next = 5;
  int64_t steps = 0;
  while (engine.has_unfinished() || next < prompts.size()) {
    if (next < prompts.size() && rng() % 3 == 0) {
      engine.add_request(std::to_string(next), engine.tokenizer().encode(prompts[next], true),
                         params[next]);
      ++next;
    }
    engine.step();
    engine.check_invariants();
    ASSERT_LT(++steps, 5000);
  }
  EXPECT_EQ(engine.num_free_kv_blocks(), engine.num_kv_blocks()) << "trial " << trial;
}

// How often each token is the `at`-th output token of `n` seeded sampled
// requests (seeds seed0, seed0 + 1, ...) for `prompt` at `temperature`,
// with top-k 12, top-p 0.95 and repetition penalty 1.1 (what the proposers'
// distribution tests compare); the engine's speculative stats into `stats`.
inline std::map<int32_t, int64_t> sampled_token_counts(const EngineOptions& o,
                                                       const std::string& prompt, int n, int at,
                                                       float temperature, uint64_t seed0,
                                                       SpecDecodeStats* stats) {
  LLMEngine engine(kModel, o);
  std::vector<std::string> prompts(static_cast<size_t>(n), prompt);
  std::vector<SamplingParams> params;
  for (int i = 0; i < n; ++i) {
    SamplingParams p = test::greedy(at + 1);
    p.temperature = temperature;
    p.top_k = 12;
    p.top_p = 0.95f;
    p.repetition_penalty = 1.1f;
    p.seed = seed0 + static_cast<uint64_t>(i);
    params.push_back(p);
  }
  std::map<int32_t, int64_t> counts;
  for (const RequestOutput& r : run(engine, prompts, params)) counts[r.token_ids[static_cast<size_t>(at)]]++;
  if (stats) *stats = engine.stats().spec_decode;
  return counts;
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

// The statistical test of a proposer's sampled output: the 24th output
// token of n seeded sampled requests (stories repeat names and phrases, so
// steps before it verify drafts) with `spec` and without speculation is one
// distribution (two-sample chi-square at 0.001), while the speculative
// samples reject a colder sampling's (so the test can tell); more than 100
// drafts accepted and some rejected.
inline void expect_sampled_tokens_follow_the_plain_distribution(const EngineOptions& spec, int n) {
  const std::string prompt = "Lily liked to play. Lily liked to play. Lily liked to";
  constexpr int kAt = 23;
  SpecDecodeStats stats;
  const auto sampled = sampled_token_counts(spec, prompt, n, kAt, 1.0f, 0, &stats);
  const auto plain = sampled_token_counts(EngineOptions{}, prompt, n, kAt, 1.0f, 1u << 20, nullptr);
  EXPECT_GT(stats.num_accepted_tokens, 100) << stats.num_drafts << " drafts of " << stats.num_draft_tokens;
  EXPECT_LT(stats.num_accepted_tokens, stats.num_draft_tokens);
  const auto [chi, critical] = two_sample_chi_square(sampled, plain);
  EXPECT_LT(chi, critical) << "speculative and plain samples differ";
  const auto colder = sampled_token_counts(EngineOptions{}, prompt, n, kAt, 0.5f, 1u << 21, nullptr);
  const auto [chi_cold, critical_cold] = two_sample_chi_square(sampled, colder);
  EXPECT_GT(chi_cold, critical_cold) << "the test cannot tell temperature 1 from 0.5";
}

}  // namespace pagoda::test::spec
