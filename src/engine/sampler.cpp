#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <unordered_map>

#include "structured/grammar_matcher.h"

namespace pagoda {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

std::mt19937_64 seeded(const SamplingParams& params) {
  if (params.seed) return std::mt19937_64(*params.seed);
  std::random_device rd;
  return std::mt19937_64((uint64_t{rd()} << 32) ^ rd());
}

// The lowest id of the largest logit (NaNs never win). Two passes: a max
// over 16 independent lanes (the compiler vectorizes it; one running
// index would chain every compare) and then the first position holding it.
int32_t argmax(std::span<const float> x) {
  constexpr size_t kLanes = 16;
  float lane_max[kLanes];
  std::fill(std::begin(lane_max), std::end(lane_max), kNegInf);
  size_t i = 0;
  for (; i + kLanes <= x.size(); i += kLanes) {
    for (size_t j = 0; j < kLanes; ++j)
      lane_max[j] = x[i + j] > lane_max[j] ? x[i + j] : lane_max[j];
  }
  float best = kNegInf;
  for (float v : lane_max) best = v > best ? v : best;
  for (; i < x.size(); ++i) best = x[i] > best ? x[i] : best;
  for (size_t k = 0; k < x.size(); ++k) {
    if (x[k] == best) return static_cast<int32_t>(k);
  }
  return 0;  // every logit NaN (or -inf): the first id, as before
}

// log(sum(exp(logits))): the log-softmax normalizer, summed in double so a
// large vocabulary of small terms loses nothing.
float log_partition(std::span<const float> logits) {
  float mx = kNegInf;
  for (float v : logits) mx = std::max(mx, v);
  double sum = 0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - mx);
  return static_cast<float>(mx + std::log(sum));
}

// The ids of the n largest logits, best first, ties to the lower id (NaNs
// never chosen); returns how many were found (fewer than n only when the
// vocabulary is smaller). One pass keeping a sorted buffer of n: n is at
// most 20, so after the first few ids a logit costs one compare, where
// sorting an index array of the whole vocabulary wrote and moved every id.
size_t top_ids(std::span<const float> logits, int n, int32_t* ids) {
  if (n <= 0) return 0;
  size_t count = 0;
  const auto cap = static_cast<size_t>(n);
  for (size_t i = 0; i < logits.size(); ++i) {
    const float v = logits[i];
    if (count == cap ? !(v > logits[ids[cap - 1]]) : std::isnan(v)) continue;
    // Ids arrive in increasing order, so an equal logit already kept stays first.
    size_t j = count < cap ? count++ : cap - 1;
    for (; j > 0 && logits[ids[j - 1]] < v; --j) ids[j] = ids[j - 1];
    ids[j] = static_cast<int32_t>(i);
  }
  return count;
}

}  // namespace

void fill_logprobs(std::span<const float> logits, int n, SampledToken& out) {
  const float log_z = log_partition(logits);
  out.logprob = logits[out.token] - log_z;
  thread_local std::vector<int32_t> ids;
  ids.resize(static_cast<size_t>(std::max(n, 0)));
  const size_t count = top_ids(logits, n, ids.data());
  out.top_logprobs.clear();
  for (size_t i = 0; i < count; ++i) out.top_logprobs.emplace_back(ids[i], logits[ids[i]] - log_z);
}

int32_t logit_rank(std::span<const float> logits, int32_t token) {
  const float t = logits[token];
  int32_t at_least = 0;
  for (float v : logits) at_least += v >= t ? 1 : 0;
  return at_least;
}

void compute_prompt_logprob(std::span<const float> logits, int32_t token, int top_n,
                            PromptLogprobs::Slot slot) {
  const float log_z = log_partition(logits);
  *slot.token = token;
  *slot.logprob = logits[token] - log_z;
  *slot.rank = logit_rank(logits, token);
  const size_t count = top_ids(logits, top_n, slot.top_ids);
  for (size_t i = 0; i < count; ++i) slot.top_logprobs[i] = logits[slot.top_ids[i]] - log_z;
  for (size_t i = count; i < static_cast<size_t>(std::max(top_n, 0)); ++i) {
    slot.top_ids[i] = -1;  // a vocabulary smaller than top_n
    slot.top_logprobs[i] = kNegInf;
  }
}

namespace {

void apply_penalties(std::span<float> logits, const SamplingParams& p,
                     std::span<const int32_t> prompt_ids, std::span<const int32_t> output_ids) {
  const auto vocab = static_cast<int32_t>(logits.size());
  if (p.repetition_penalty != 1.0f) {
    thread_local std::vector<uint8_t> seen;
    seen.assign(logits.size(), 0);
    for (int32_t id : prompt_ids)
      if (id >= 0 && id < vocab) seen[id] = 1;
    for (int32_t id : output_ids)
      if (id >= 0 && id < vocab) seen[id] = 1;
    for (int32_t id = 0; id < vocab; ++id) {
      if (!seen[id]) continue;
      logits[id] =
          logits[id] > 0 ? logits[id] / p.repetition_penalty : logits[id] * p.repetition_penalty;
    }
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    std::unordered_map<int32_t, int> counts;
    for (int32_t id : output_ids) counts[id]++;
    for (const auto& [id, count] : counts) {
      if (id < 0 || id >= vocab) continue;
      logits[id] -= p.frequency_penalty * static_cast<float>(count) + p.presence_penalty;
    }
  }
}

// vLLM's allowed_token_ids, bad_words and logit_bias, in its order (the
// masks first; the bias before the penalties).
void apply_token_constraints(std::span<float> logits, const SamplingParams& p,
                             std::span<const int32_t> output_ids) {
  if (!p.allowed_token_ids.empty()) {
    // Kept values are copied out and back, so the mask costs one pass over
    // the vocabulary and none per allowed id beyond that.
    thread_local std::vector<std::pair<int32_t, float>> kept;
    kept.clear();
    for (int32_t id : p.allowed_token_ids) kept.emplace_back(id, logits[id]);
    std::fill(logits.begin(), logits.end(), kNegInf);
    for (const auto& [id, v] : kept) logits[id] = v;
  }
  for (const std::vector<int32_t>& word : p.bad_words_token_ids) {
    const size_t prefix = word.size() - 1;
    if (prefix > output_ids.size()) continue;
    if (std::equal(word.begin(), word.end() - 1, output_ids.end() - prefix))
      logits[word.back()] = kNegInf;
  }
  for (const auto& [id, bias] : p.logit_bias) logits[id] += bias;
}

}  // namespace

void filtered_distribution(std::span<const float> logits, const SamplingParams& p,
                           FilteredDistribution* out) {
  std::vector<int32_t>& ids = out->ids;
  ids.clear();
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] != kNegInf) ids.push_back(static_cast<int32_t>(i));
  }
  if (ids.empty()) {  // everything masked: draw_token gives kNoToken
    out->probs.clear();
    out->total = 0;
    return;
  }
  auto better = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  // Candidates sorted best first; with top_k only the k best are sorted.
  // Without top-k, min-p or top-p nothing is cut, and the ids stay in id
  // order: sorting a 150k vocabulary cost more than the rest of a row's
  // sampling, which a speculative step pays for every draft it verifies.
  size_t keep = ids.size();
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < keep) keep = p.top_k;
  const bool filters = keep < ids.size() || p.min_p > 0.0f || p.top_p < 1.0f;
  if (filters) {
    std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(keep), ids.end(),
                      better);
    ids.resize(keep);
  }

  std::vector<double>& probs = out->probs;
  probs.resize(keep);
  double mx = logits[ids[0]];
  if (!filters) {
    for (int32_t id : ids) mx = std::max<double>(mx, logits[id]);
  }
  double sum = 0;
  for (size_t i = 0; i < keep; ++i) {
    probs[i] = std::exp((logits[ids[i]] - mx) / p.temperature);
    sum += probs[i];
  }
  for (double& v : probs) v /= sum;
  // vLLM order: min-p, then top-p over what is left (renormalized).
  if (p.min_p > 0.0f) {  // probs are sorted, so the survivors are a prefix
    const double threshold = p.min_p * probs[0];
    size_t n = 1;
    while (n < keep && probs[n] >= threshold) ++n;
    keep = n;
  }
  if (p.top_p < 1.0f) {  // smallest prefix whose mass reaches top_p of the survivors
    double kept_mass = 0;
    for (size_t i = 0; i < keep; ++i) kept_mass += probs[i];
    double mass = 0;
    size_t n = 0;
    while (n < keep) {
      mass += probs[n++];
      if (mass >= p.top_p * kept_mass) break;
    }
    keep = n;
  }
  ids.resize(keep);
  probs.resize(keep);
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += probs[i];
  out->total = total;
}

double FilteredDistribution::prob(int32_t id) const {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] == id) return probs[i] / total;
  }
  return 0.0;
}

int32_t draw_token(const FilteredDistribution& d, std::mt19937_64& rng) {
  if (d.ids.empty()) return kNoToken;
  double u = std::uniform_real_distribution<double>(0.0, d.total)(rng);
  for (size_t i = 0; i < d.ids.size(); ++i) {
    u -= d.probs[i];
    if (u < 0) return d.ids[i];
  }
  return d.ids.back();
}

SequenceRng::SequenceRng(const SamplingParams& params) : rng_(seeded(params)) {}

int32_t greedy_token(std::span<const float> logits) {
  const int32_t id = argmax(logits);
  return logits[static_cast<size_t>(id)] > kNegInf ? id : kNoToken;  // NaN or -inf: none
}

void apply_logits_processors(std::span<float> logits, const SamplingParams& params,
                             std::span<const int32_t> prompt_ids,
                             std::span<const int32_t> output_ids,
                             std::span<const int32_t> stop_ids) {
  if (static_cast<int>(output_ids.size()) < params.min_tokens) {
    for (int32_t id : stop_ids) {
      if (id >= 0 && static_cast<size_t>(id) < logits.size()) logits[id] = kNegInf;
    }
  }
  apply_token_constraints(logits, params, output_ids);
  apply_penalties(logits, params, prompt_ids, output_ids);
}

SampledToken sample_token(std::span<float> logits, const SamplingParams& params,
                          std::span<const int32_t> prompt_ids, std::span<const int32_t> output_ids,
                          std::span<const int32_t> stop_ids, SequenceRng& rng,
                          const structured::GrammarMatcher* grammar) {
  SampledToken out;
  thread_local std::vector<float> raw;
  if (params.logprobs >= 0) raw.assign(logits.begin(), logits.end());
  if (grammar) grammar->apply_mask(logits);

  apply_logits_processors(logits, params, prompt_ids, output_ids, stop_ids);
  if (params.greedy()) {
    out.token = greedy_token(logits);
  } else {
    thread_local FilteredDistribution dist;
    filtered_distribution(logits, params, &dist);
    out.token = draw_token(dist, rng.engine());
  }
  if (params.logprobs >= 0 && out.token != kNoToken) fill_logprobs(raw, params.logprobs, out);
  return out;
}

}  // namespace pagoda
