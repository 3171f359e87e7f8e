// The rejection sampler on synthetic logits (no model): greedy verification
// picks what greedy sampling would, and with temperature > 0 the emitted
// tokens follow the target distribution, whatever the proposer's q, with
// penalties, top-k, min-p and top-p applied as plain sampling applies them.
// The statistical checks are chi-square goodness-of-fit tests at
// significance 0.001 over fixed seeds (deterministic), each paired with a
// check that the same samples reject a wrong distribution (the test has
// the power to fail).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <vector>

#include "engine/sampler.h"
#include "engine/spec_decode/rejection_sampler.h"

namespace pagoda {
namespace {

constexpr int kVocab = 10;
constexpr int kTrials = 40000;

// The target distribution written out independently of the sampler:
// repetition penalty (prompt + output), frequency/presence (output), then
// softmax(l / T), top-k, min-p (relative to the top probability), top-p
// over the survivors, renormalized.
std::vector<double> reference_distribution(std::vector<float> l, const SamplingParams& p,
                                           const std::vector<int32_t>& prompt,
                                           const std::vector<int32_t>& output) {
  std::vector<bool> seen(l.size(), false);
  for (int32_t id : prompt) seen[id] = true;
  for (int32_t id : output) seen[id] = true;
  for (size_t i = 0; i < l.size(); ++i) {
    if (seen[i]) l[i] = l[i] > 0 ? l[i] / p.repetition_penalty : l[i] * p.repetition_penalty;
  }
  std::map<int32_t, int> counts;
  for (int32_t id : output) counts[id]++;
  for (const auto& [id, n] : counts) l[id] -= p.frequency_penalty * n + p.presence_penalty;
  std::vector<int> order(l.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return l[a] > l[b]; });
  std::vector<double> prob(l.size(), 0.0);
  double z = 0;
  for (size_t i = 0; i < l.size(); ++i) z += std::exp((l[i] - l[order[0]]) / p.temperature);
  for (size_t i = 0; i < l.size(); ++i) prob[i] = std::exp((l[i] - l[order[0]]) / p.temperature) / z;
  size_t keep = p.top_k > 0 ? std::min<size_t>(p.top_k, l.size()) : l.size();
  double kept = 0;
  for (size_t i = 0; i < keep; ++i) kept += prob[order[i]];
  // min-p against the top probability among the top-k (renormalized).
  size_t n = 1;
  while (n < keep && prob[order[n]] / kept >= p.min_p * prob[order[0]] / kept) ++n;
  keep = n;
  double mass_all = 0;
  for (size_t i = 0; i < keep; ++i) mass_all += prob[order[i]];
  double mass = 0;
  n = 0;
  while (n < keep) {
    mass += prob[order[n++]];
    if (mass >= p.top_p * mass_all) break;
  }
  std::vector<double> out(l.size(), 0.0);
  double total = 0;
  for (size_t i = 0; i < n; ++i) total += prob[order[i]];
  for (size_t i = 0; i < n; ++i) out[order[i]] = prob[order[i]] / total;
  return out;
}

// Chi-square statistic of the counts against `expected` probabilities, and
// the critical value at significance 0.001 (Wilson-Hilferty); a category
// with probability 0 that was drawn makes the statistic infinite.
struct ChiSquare {
  double statistic = 0, critical = 0;
  bool fits() const { return statistic < critical; }
};
ChiSquare chi_square(const std::vector<int64_t>& counts, const std::vector<double>& expected) {
  int64_t n = 0;
  for (int64_t c : counts) n += c;
  ChiSquare r;
  int df = -1;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (expected[i] == 0) {
      if (counts[i] > 0) r.statistic = INFINITY;
      continue;
    }
    ++df;
    const double e = expected[i] * static_cast<double>(n);
    r.statistic += (counts[i] - e) * (counts[i] - e) / e;
  }
  const double z = 3.0902;  // the normal quantile at 0.999
  const double a = 2.0 / (9.0 * df);
  r.critical = df * std::pow(1 - a + z * std::sqrt(a), 3);
  return r;
}

const std::vector<float> kRow0 = {2.0f, 1.5f, 1.4f, 0.3f, -0.2f, 1.0f, 0.9f, -1.0f, 0.2f, 1.7f};
const std::vector<float> kRow1 = {0.1f, 0.5f, 1.2f, 1.1f, -0.5f, 0.0f, 2.1f, 0.4f, 1.9f, -2.0f};
const std::vector<int32_t> kPrompt = {1, 4};
const std::vector<int32_t> kOutput = {2, 9, 9};

SamplingParams filtered_params() {
  SamplingParams p;
  p.temperature = 0.9f;
  p.top_k = 8;
  p.min_p = 0.05f;
  p.top_p = 0.92f;
  p.repetition_penalty = 1.3f;
  p.frequency_penalty = 0.2f;
  p.presence_penalty = 0.1f;
  return p;
}

// Runs verification of one draft token `kTrials` times with seeds 0, 1, ...
// (draft drawn from q with a separate fixed-seed rng when q is given);
// returns counts of the first emitted token and, among trials that accepted
// the draft `conditional_on`, of the bonus token.
struct Counts {
  std::vector<int64_t> first = std::vector<int64_t>(kVocab, 0);
  std::vector<int64_t> bonus = std::vector<int64_t>(kVocab, 0);
};
Counts run_trials(SamplingParams p, int32_t fixed_draft, const FilteredDistribution* q,
                  int32_t conditional_on) {
  Counts c;
  std::mt19937_64 draft_rng(99);
  for (int t = 0; t < kTrials; ++t) {
    p.seed = static_cast<uint64_t>(t);
    SequenceRng rng(p);
    std::vector<float> r0 = kRow0, r1 = kRow1;
    std::vector<float*> rows = {r0.data(), r1.data()};
    const int32_t draft = q ? draw_token(*q, draft_rng) : fixed_draft;
    std::vector<int32_t> drafts = {draft};
    VerifyInput in;
    in.rows = rows;
    in.vocab_size = kVocab;
    in.draft = drafts;
    if (q) in.draft_dists = std::span<const FilteredDistribution>(q, 1);
    in.params = &p;
    in.prompt_ids = kPrompt;
    in.output_ids = kOutput;
    std::vector<SampledToken> out;
    const int32_t accepted = verify_draft_tokens(in, rng, &out);
    EXPECT_EQ(out.size(), static_cast<size_t>(accepted) + 1);
    c.first[out[0].token]++;
    if (accepted == 1 && draft == conditional_on) c.bonus[out[1].token]++;
  }
  return c;
}

TEST(RejectionSampler, PointMassDraftKeepsTheTargetDistribution) {
  const SamplingParams p = filtered_params();
  const std::vector<double> target = reference_distribution(kRow0, p, kPrompt, kOutput);
  // Drafts of high, middling and zero target probability (7 is filtered out).
  for (int32_t draft : {0, 6, 7}) {
    const Counts c = run_trials(p, draft, nullptr, draft);
    const ChiSquare first = chi_square(c.first, target);
    EXPECT_TRUE(first.fits()) << "draft " << draft << ": chi2 " << first.statistic << " >= "
                              << first.critical;
    // Power: a sampler that always kept the draft, or mixed it in at half
    // weight, would be caught by the same samples.
    std::vector<double> biased = target;
    for (double& v : biased) v *= 0.5;
    biased[draft] += 0.5;
    EXPECT_FALSE(chi_square(c.first, biased).fits()) << "draft " << draft;
    // The bonus token after an accepted draft follows row 1 with the draft
    // counted as output (penalties see it).
    if (target[draft] > 0) {
      std::vector<int32_t> output = kOutput;
      output.push_back(draft);
      const std::vector<double> bonus = reference_distribution(kRow1, p, kPrompt, output);
      const ChiSquare b = chi_square(c.bonus, bonus);
      EXPECT_TRUE(b.fits()) << "bonus after " << draft << ": chi2 " << b.statistic;
      // 6 is row 1's top logit, so its penalty as output moves the bonus
      // distribution well past what the samples allow.
      if (draft == 6) {
        EXPECT_FALSE(
            chi_square(c.bonus, reference_distribution(kRow1, p, kPrompt, kOutput)).fits())
            << "the penalties must see the accepted draft";
      }
    } else {
      EXPECT_EQ(c.first[draft], 0);
    }
  }
}

TEST(RejectionSampler, DraftDistributionKeepsTheTargetDistribution) {
  const SamplingParams p = filtered_params();
  const std::vector<double> target = reference_distribution(kRow0, p, kPrompt, kOutput);
  // A proposer's own distribution q, different from the target (it favors
  // ids the target filters out or gives little).
  SamplingParams qp;
  qp.temperature = 1.5f;
  const std::vector<float> q_logits = {0.0f, 0.2f, 1.0f, 1.5f, 0.1f, 0.0f, 2.0f, 1.8f, -0.5f, 0.3f};
  FilteredDistribution q;
  filtered_distribution(q_logits, qp, &q);
  const Counts c = run_trials(p, -1, &q, 6);
  const ChiSquare first = chi_square(c.first, target);
  EXPECT_TRUE(first.fits()) << "chi2 " << first.statistic << " >= " << first.critical;
  std::vector<double> q_probs(kVocab);
  for (int i = 0; i < kVocab; ++i) q_probs[i] = q.prob(i);
  EXPECT_FALSE(chi_square(c.first, q_probs).fits());
  std::vector<int32_t> output = kOutput;
  output.push_back(6);
  EXPECT_TRUE(chi_square(c.bonus, reference_distribution(kRow1, p, kPrompt, output)).fits());
}

TEST(RejectionSampler, GreedyAcceptsWhileDraftsAreTheArgmax) {
  SamplingParams p;
  p.temperature = 0;
  p.logprobs = 1;
  // Argmaxes of the rows: 0, 6, 2, 3 (row 2 after the repetition penalty
  // on 1... is still 2).
  std::vector<std::vector<float>> rows = {kRow0, kRow1, kRow1, kRow1};
  rows[2][2] = 5.0f;
  rows[3][3] = 5.0f;
  std::vector<float*> ptrs;
  for (auto& r : rows) ptrs.push_back(r.data());
  SequenceRng rng(p);
  for (const auto& [drafts, want] : std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>>{
           {{0, 6, 2}, {0, 6, 2, 3}},  // all accepted: the bonus from the last row
           {{0, 6, 1}, {0, 6, 2}},     // third rejected: row 2's argmax
           {{4, 6, 2}, {0}}}) {        // first rejected
    std::vector<std::vector<float>> scratch = rows;
    std::vector<float*> rp;
    for (auto& r : scratch) rp.push_back(r.data());
    VerifyInput in;
    in.rows = rp;
    in.vocab_size = kVocab;
    in.draft = drafts;
    in.params = &p;
    std::vector<SampledToken> out;
    const int32_t accepted = verify_draft_tokens(in, rng, &out);
    std::vector<int32_t> got;
    for (const SampledToken& t : out) got.push_back(t.token);
    EXPECT_EQ(got, want);
    EXPECT_EQ(accepted, static_cast<int32_t>(want.size()) - 1);
    // Logprobs are the raw target row's.
    const float lz = std::log([&] {
      double s = 0;
      for (float v : rows[0]) s += std::exp(v);
      return s;
    }());
    EXPECT_NEAR(out[0].logprob, rows[0][out[0].token] - lz, 1e-5);
  }
}

}  // namespace
}  // namespace pagoda
