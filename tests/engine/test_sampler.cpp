// Sampling against distributions computed independently here (double
// precision, full sort), penalties and logprobs from their formulas.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "core/error.h"
#include "engine/sampler.h"
#include "engine/stop_checker.h"

namespace pagoda {
namespace {

const std::vector<float> kLogits = {2.0f, 1.5f, 0.3f, -1.0f, 1.5f, 0.9f, -3.0f, 0.0f};

// The distribution sampling should follow: softmax(logits / T) restricted
// to top-k, then min-p, then top-p (vLLM order), renormalized.
std::vector<double> expected_distribution(const SamplingParams& p) {
  const size_t n = kLogits.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [](size_t a, size_t b) { return kLogits[a] > kLogits[b]; });
  std::vector<double> prob(n, 0.0);
  double z = 0;
  for (size_t i = 0; i < n; ++i) z += std::exp(kLogits[i] / double{p.temperature});
  for (size_t i = 0; i < n; ++i) prob[i] = std::exp(kLogits[i] / double{p.temperature}) / z;
  std::vector<bool> keep(n, true);
  if (p.top_k > 0) {
    for (size_t r = p.top_k; r < n; ++r) keep[order[r]] = false;
  }
  const double top = prob[order[0]];
  for (size_t i = 0; i < n; ++i) {
    if (prob[i] < p.min_p * top) keep[i] = false;
  }
  double kept = 0;
  for (size_t i = 0; i < n; ++i) kept += keep[i] ? prob[i] : 0;
  double mass = 0;
  bool reached = false;
  for (size_t r = 0; r < n; ++r) {
    const size_t i = order[r];
    if (!keep[i]) continue;
    if (reached) {
      keep[i] = false;
      continue;
    }
    mass += prob[i] / kept;
    if (mass >= p.top_p) reached = true;
  }
  std::vector<double> out(n, 0.0);
  double total = 0;
  for (size_t i = 0; i < n; ++i) total += keep[i] ? prob[i] : 0;
  for (size_t i = 0; i < n; ++i) out[i] = keep[i] ? prob[i] / total : 0;
  return out;
}

std::vector<double> empirical(const SamplingParams& p, int draws) {
  SequenceRng rng(p);
  std::vector<double> counts(kLogits.size(), 0);
  for (int i = 0; i < draws; ++i) {
    std::vector<float> logits = kLogits;
    counts[sample_token(logits, p, {}, {}, {}, rng).token] += 1;
  }
  for (double& c : counts) c /= draws;
  return counts;
}

TEST(Sampler, DistributionsMatchTheirDefinition) {
  struct Case {
    float temperature, top_p;
    int top_k;
    float min_p;
  };
  for (const Case& c : std::vector<Case>{{1.0f, 1.0f, 0, 0.0f},
                                         {0.5f, 1.0f, 0, 0.0f},
                                         {1.0f, 1.0f, 3, 0.0f},
                                         {1.0f, 0.7f, 0, 0.0f},
                                         {1.3f, 1.0f, 0, 0.2f},
                                         {0.8f, 0.9f, 5, 0.05f}}) {
    SamplingParams p;
    p.temperature = c.temperature;
    p.top_p = c.top_p;
    p.top_k = c.top_k;
    p.min_p = c.min_p;
    p.seed = 42;
    const auto want = expected_distribution(p);
    const auto got = empirical(p, 200000);
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], 0.006)
          << "token " << i << " T=" << c.temperature << " top_p=" << c.top_p << " top_k=" << c.top_k
          << " min_p=" << c.min_p;
      if (want[i] == 0) {
        EXPECT_EQ(got[i], 0) << "filtered token " << i << " was sampled";
      }
    }
  }
}

TEST(Sampler, SeedsAndGreedy) {
  SamplingParams p;
  p.seed = 7;
  auto draw = [&](SamplingParams params) {
    SequenceRng rng(params);
    std::vector<int32_t> out;
    for (int i = 0; i < 50; ++i) {
      std::vector<float> l = kLogits;
      out.push_back(sample_token(l, params, {}, {}, {}, rng).token);
    }
    return out;
  };
  EXPECT_EQ(draw(p), draw(p));
  SamplingParams other = p;
  other.seed = 8;
  EXPECT_NE(draw(p), draw(other));
  SamplingParams greedy;
  greedy.temperature = 0;
  const auto g = draw(greedy);
  EXPECT_TRUE(std::all_of(g.begin(), g.end(), [](int32_t t) { return t == 0; }));
  // Ties go to the lowest id.
  std::vector<float> tie = {1, 5, 5, 2};
  SequenceRng rng(greedy);
  EXPECT_EQ(sample_token(tie, greedy, {}, {}, {}, rng).token, 1);
}

TEST(Sampler, PenaltiesFollowTheirFormulas) {
  SamplingParams p;
  p.temperature = 0;
  p.logprobs = -1;
  const std::vector<int32_t> prompt = {1}, output = {0, 0, 2};
  // Expected adjusted logits, computed from the definitions:
  //   repetition: seen ids (1 from prompt; 0, 2 from output): x>0 ? x/r : x*r
  //   frequency/presence: output counts only: 0 appears twice, 2 once.
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  std::vector<float> l = {3.0f, 2.9f, -1.0f, 1.3f};
  const std::vector<float> want = {3.0f / 2 - 0.5f * 2 - 0.25f, 2.9f / 2, -1.0f * 2 - 0.5f - 0.25f,
                                   1.3f};
  SequenceRng rng(p);
  const auto s = sample_token(l, p, prompt, output, {}, rng);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_FLOAT_EQ(l[i], want[i]) << i;
  EXPECT_EQ(s.token, 1);  // 1.45 beats 0.25 and 1.3
}

TEST(Sampler, LogprobsAreRawLogSoftmax) {
  SamplingParams p;
  p.temperature = 0;
  p.logprobs = 3;
  p.repetition_penalty = 3.0f;  // must not affect reported logprobs
  std::vector<float> l = kLogits;
  SequenceRng rng(p);
  const std::vector<int32_t> prompt = {0};
  const auto s = sample_token(l, p, prompt, {}, {}, rng);
  double z = 0;
  for (float x : kLogits) z += std::exp(double{x});
  auto lp = [&](int i) { return kLogits[i] - std::log(z); };
  EXPECT_NEAR(s.logprob, lp(s.token), 1e-5);
  ASSERT_EQ(s.top_logprobs.size(), 3u);
  EXPECT_EQ(s.top_logprobs[0].first, 0);
  EXPECT_EQ(s.top_logprobs[1].first, 1);  // tie 1.5 with id 4: lower id first
  EXPECT_EQ(s.top_logprobs[2].first, 4);
  for (const auto& [id, v] : s.top_logprobs) EXPECT_NEAR(v, lp(id), 1e-5);
}

// One prompt_logprobs entry against log_softmax, rank and top N worked out
// here with a full sort.
TEST(Sampler, PromptLogprobEntryIsRawLogSoftmaxWithRankAndTopN) {
  double z = 0;
  for (float x : kLogits) z += std::exp(double{x});
  auto lp = [&](int i) { return kLogits[i] - std::log(z); };
  PromptLogprobs store(3, /*prompt_len=*/9);
  ASSERT_EQ(store.num_positions(), 8u);
  store.extend(kLogits.size());
  for (int32_t token = 0; token < static_cast<int32_t>(kLogits.size()); ++token) {
    compute_prompt_logprob(kLogits, token, 3, store.slot(token));
    EXPECT_EQ(store.token(token), token);
    EXPECT_NEAR(store.logprob(token), lp(token), 1e-5);
    // vLLM's rank: how many logits are >= the token's (ties count against it).
    int32_t rank = 0;
    for (float x : kLogits) rank += x >= kLogits[token] ? 1 : 0;
    EXPECT_EQ(store.rank(token), rank) << token;
    EXPECT_EQ(logit_rank(kLogits, token), rank);
    const auto ids = store.top_ids(token);
    ASSERT_EQ(ids.size(), 3u);
    EXPECT_EQ(ids[0], 0);
    EXPECT_EQ(ids[1], 1);  // 1.5 tied with id 4: the lower id first
    EXPECT_EQ(ids[2], 4);
    for (size_t k = 0; k < 3; ++k) EXPECT_NEAR(store.top_logprobs(token)[k], lp(ids[k]), 1e-5);
  }
  EXPECT_TRUE(store.complete());
  EXPECT_EQ(store.rank(1), 3);  // 1.5: ids 0, 1 and 4 are >= it
  EXPECT_EQ(store.rank(6), 8);  // the smallest logit
}

TEST(Sampler, PromptLogprobTopNPastTheVocabularyAndNaNs) {
  const std::vector<float> logits = {0.5f, NAN, 2.0f};
  PromptLogprobs store(5, 2);
  store.extend(1);
  compute_prompt_logprob(logits, 0, 5, store.slot(0));
  const auto ids = store.top_ids(0);
  EXPECT_EQ(ids[0], 2);
  EXPECT_EQ(ids[1], 0);
  EXPECT_EQ(ids[2], -1);  // NaN is never chosen; nothing past the vocabulary
  EXPECT_EQ(ids[4], -1);
  EXPECT_THROW(store.extend(1), std::exception);  // one position only: never more entries
}

TEST(Sampler, MinTokensMasksStopIds) {
  SamplingParams p;
  p.temperature = 0;
  p.min_tokens = 2;
  std::vector<float> l = kLogits;
  SequenceRng rng(p);
  const std::vector<int32_t> stop = {0};
  const std::vector<int32_t> one = {5}, two = {5, 5};
  EXPECT_EQ(sample_token(l, p, {}, one, stop, rng).token, 1);  // 0 masked: 1 output < 2
  l = kLogits;
  EXPECT_EQ(sample_token(l, p, {}, two, stop, rng).token, 0);
}

// softmax(x) in double, for the constraint tests' expected distributions.
std::vector<double> softmax(const std::vector<double>& x) {
  double z = 0;
  for (double v : x) z += std::isinf(v) ? 0 : std::exp(v);
  std::vector<double> p;
  for (double v : x) p.push_back(std::isinf(v) ? 0 : std::exp(v) / z);
  return p;
}

TEST(Sampler, LogitBiasIsAddedBeforeSamplingAndNotToLogprobs) {
  SamplingParams p;
  p.seed = 3;
  p.logprobs = 0;
  p.logit_bias = {{6, 4.0f}, {0, -100.0f}, {3, 1.5f}};
  std::vector<double> biased(kLogits.begin(), kLogits.end());
  biased[6] += 4.0;
  biased[0] -= 100.0;
  biased[3] += 1.5;
  const auto want = softmax(biased);
  const auto got = empirical(p, 200000);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 0.006) << "token " << i;
  // Greedy: the best biased logit (1.5, ids 1 and 4: the lower id), and the
  // reported logprob is the raw model's.
  p.temperature = 0;
  std::vector<float> l = kLogits;
  SequenceRng rng(p);
  const auto s = sample_token(l, p, {}, {}, {}, rng);
  EXPECT_EQ(s.token, 1);
  double z = 0;
  for (float x : kLogits) z += std::exp(double{x});
  EXPECT_NEAR(s.logprob, kLogits[1] - std::log(z), 1e-5);
  p.logit_bias = {{6, 100.0f}};
  l = kLogits;
  EXPECT_EQ(sample_token(l, p, {}, {}, {}, rng).token, 6);
}

TEST(Sampler, AllowedTokenIdsRestrictAndRenormalize) {
  SamplingParams p;
  p.seed = 5;
  p.allowed_token_ids = {3, 6, 7};
  std::vector<double> masked(kLogits.size(), -INFINITY);
  for (int32_t id : p.allowed_token_ids) masked[id] = kLogits[id];
  const auto want = softmax(masked);
  const auto got = empirical(p, 100000);
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 0.006) << "token " << i;
    if (want[i] == 0) {
      EXPECT_EQ(got[i], 0) << "token " << i << " is not allowed";
    }
  }
  p.temperature = 0;
  std::vector<float> l = kLogits;
  SequenceRng rng(p);
  EXPECT_EQ(sample_token(l, p, {}, {}, {}, rng).token, 7);  // 0.0 beats -1 and -3
}

TEST(Sampler, BadWordsMaskTheTokenThatWouldCompleteAWord) {
  SamplingParams p;
  p.temperature = 0;
  // A one-token word is always banned; a two-token word only right after
  // its first token.
  p.bad_words_token_ids = {{0}, {5, 1}};
  SequenceRng rng(p);
  std::vector<float> l = kLogits;
  EXPECT_EQ(sample_token(l, p, {}, {}, {}, rng).token, 1);  // 0 banned
  l = kLogits;
  const std::vector<int32_t> after_5 = {2, 5}, after_2 = {5, 2};
  EXPECT_EQ(sample_token(l, p, {}, after_5, {}, rng).token, 4);  // 0 and 1 banned; 4 ties 1
  l = kLogits;
  EXPECT_EQ(sample_token(l, p, {}, after_2, {}, rng).token, 1);
  // The prompt does not count: only what was generated can start a word.
  l = kLogits;
  const std::vector<int32_t> prompt = {5};
  EXPECT_EQ(sample_token(l, p, prompt, {}, {}, rng).token, 1);
}

TEST(Sampler, NothingAllowedGivesNoToken) {
  // allowed_token_ids that bad_words remove leave no finite logit: greedy
  // and sampled draws both say so (kNoToken) instead of reading past an
  // empty candidate list, with or without logprobs.
  for (float temperature : {0.0f, 1.0f}) {
    SamplingParams p;
    p.temperature = temperature;
    p.top_k = temperature > 0 ? 3 : 0;
    p.logprobs = 2;
    p.allowed_token_ids = {3};
    p.bad_words_token_ids = {{3}};
    SequenceRng rng(p);
    std::vector<float> l = kLogits;
    EXPECT_EQ(sample_token(l, p, {}, {}, {}, rng).token, kNoToken) << temperature;
  }
  std::vector<float> none(kLogits.size(), -INFINITY);
  EXPECT_EQ(greedy_token(none), kNoToken);
}

TEST(SamplingParams, TokenIdsAreCheckedAgainstTheVocabulary) {
  auto message = [](SamplingParams p) -> std::string {
    try {
      p.validate_token_ids(8);
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  };
  SamplingParams p;
  EXPECT_EQ(message(p), "");
  p.logit_bias = {{8, 1.0f}};
  EXPECT_NE(message(p).find("logit_bias"), std::string::npos) << message(p);
  p = {};
  p.allowed_token_ids = {7, -1};
  EXPECT_NE(message(p).find("allowed_token_ids"), std::string::npos) << message(p);
  p = {};
  p.bad_words_token_ids = {{1, 9}};
  EXPECT_NE(message(p).find("bad_words"), std::string::npos) << message(p);
}

TEST(SamplingParams, ValidateNamesTheField) {
  auto expect_bad = [](auto edit, const std::string& field) {
    SamplingParams p;
    edit(p);
    try {
      p.validate();
      ADD_FAILURE() << field << " accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  expect_bad([](SamplingParams& p) { p.temperature = -0.1f; }, "temperature");
  expect_bad([](SamplingParams& p) { p.temperature = NAN; }, "temperature");
  expect_bad([](SamplingParams& p) { p.top_p = 0; }, "top_p");
  expect_bad([](SamplingParams& p) { p.top_p = 1.5f; }, "top_p");
  expect_bad([](SamplingParams& p) { p.top_k = -2; }, "top_k");
  expect_bad([](SamplingParams& p) { p.min_p = 2; }, "min_p");
  expect_bad([](SamplingParams& p) { p.repetition_penalty = 0; }, "repetition_penalty");
  expect_bad([](SamplingParams& p) { p.presence_penalty = 3; }, "presence_penalty");
  expect_bad([](SamplingParams& p) { p.frequency_penalty = -2.5f; }, "frequency_penalty");
  expect_bad([](SamplingParams& p) { p.max_tokens = 0; }, "max_tokens");
  expect_bad([](SamplingParams& p) { p.min_tokens = 20; }, "min_tokens");
  expect_bad([](SamplingParams& p) { p.logprobs = 21; }, "logprobs");
  expect_bad([](SamplingParams& p) { p.prompt_logprobs = 21; }, "prompt_logprobs");
  expect_bad([](SamplingParams& p) { p.prompt_logprobs = -2; }, "prompt_logprobs");
  expect_bad([](SamplingParams& p) { p.stop = {""}; }, "stop");
  expect_bad([](SamplingParams& p) { p.logit_bias = {{1, 100.5f}}; }, "logit_bias");
  expect_bad([](SamplingParams& p) { p.logit_bias = {{1, NAN}}; }, "logit_bias");
  expect_bad([](SamplingParams& p) { p.bad_words_token_ids = {{}}; }, "bad_words");
  EXPECT_NO_THROW(SamplingParams().validate());
}

TEST(StopChecker, FindsEarliestStopAcrossPieces) {
  const StopChecker c({"\n\n", "END", "ab"});
  std::string text = "hello wor";
  EXPECT_FALSE(c.find(text, text.size()));
  text += "ld E";
  EXPECT_FALSE(c.find(text, 4));
  EXPECT_EQ(c.hold_back(text), 1u);  // "E" may begin "END"
  text += "ND and ab";
  EXPECT_EQ(c.find(text, 9), text.find("END"));  // earliest of END and ab
  // A match that lies wholly in old text is not reported again.
  EXPECT_FALSE(c.find("xx ab yy", 2));
}

TEST(StopChecker, HoldBackAndMultibyte) {
  const StopChecker c({"世界", "abc"});
  EXPECT_EQ(c.hold_back("hello ab"), 2u);
  EXPECT_EQ(c.hold_back("hello a"), 1u);
  EXPECT_EQ(c.hold_back("hello"), 0u);
  EXPECT_EQ(c.hold_back("你好世"), 3u);  // the first character of 世界 (3 bytes)
  const std::string t = "你好世界!";
  EXPECT_EQ(c.find(t, 4), std::optional<size_t>(6));
  EXPECT_EQ(StopChecker().hold_back("abc"), 0u);
}

}  // namespace
}  // namespace pagoda
