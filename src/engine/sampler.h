// Turns one sequence's logits into the next token under its SamplingParams.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "engine/prompt_logprobs.h"
#include "engine/sampling_params.h"

namespace pagoda {

namespace structured {
class GrammarMatcher;
}

struct SampledToken {
  int32_t token = -1;
  float logprob = 0.0f;  // of the chosen token (only filled when params.logprobs >= 0)
  // Top params.logprobs (id, logprob) pairs, best first.
  std::vector<std::pair<int32_t, float>> top_logprobs;
};

// Per-sequence random state: seeded from params.seed when given, otherwise
// from a global random source.
class SequenceRng {
 public:
  explicit SequenceRng(const SamplingParams& params);
  std::mt19937_64& engine() { return rng_; }

 private:
  std::mt19937_64 rng_;
};

// Samples the next token. `logits` (vocab floats) is used as scratch and
// changed. Logprobs are those of the raw model distribution (log_softmax of
// the logits before penalties/temperature), as vLLM reports by default.
// `stop_ids` are EOS + stop_token_ids; they are masked while
// output_ids.size() < params.min_tokens. `grammar`: the request's matcher
// when its output is constrained (its mask applies first), else null.
SampledToken sample_token(std::span<float> logits, const SamplingParams& params,
                          std::span<const int32_t> prompt_ids, std::span<const int32_t> output_ids,
                          std::span<const int32_t> stop_ids, SequenceRng& rng,
                          const structured::GrammarMatcher* grammar = nullptr);

// The pieces of sample_token, for speculative verification
// (spec_decode/rejection_sampler.h), which applies them per draft position.
//
// Masks stop ids while output_ids.size() < params.min_tokens, then
// allowed_token_ids, bad words, logit_bias and the penalties (vLLM's order).
void apply_logits_processors(std::span<float> logits, const SamplingParams& params,
                             std::span<const int32_t> prompt_ids,
                             std::span<const int32_t> output_ids,
                             std::span<const int32_t> stop_ids);
// What greedy_token / draw_token / sample_token return when the masks left
// no token at all (a grammar state whose only continuation min_tokens holds
// back, allowed_token_ids that bad_words remove): the engine then finishes
// the request with reason stop, appending nothing.
inline constexpr int32_t kNoToken = -1;
// The lowest id of the largest logit (greedy sampling); kNoToken if none is
// finite.
int32_t greedy_token(std::span<const float> logits);
// What a temperature > 0 draw picks from: softmax(logits / temperature)
// after top-k, then min-p, then top-p. ids best first with unnormalized
// probs[i] (total = their sum; the kept mass, before renormalizing); with
// none of those filters, every id with a finite logit in id order.
struct FilteredDistribution {
  std::vector<int32_t> ids;
  std::vector<double> probs;
  double total = 0;
  double prob(int32_t id) const;  // normalized; 0 for a filtered-out id
};
void filtered_distribution(std::span<const float> logits, const SamplingParams& params,
                           FilteredDistribution* out);
// kNoToken for an empty distribution.
int32_t draw_token(const FilteredDistribution& dist, std::mt19937_64& rng);
// Raw logprobs (log_softmax of `raw_logits`) of out.token and the top n.
void fill_logprobs(std::span<const float> raw_logits, int n, SampledToken& out);

// How many ids have a logit >= logits[token]: the token's 1-based rank as
// vLLM counts it (ties rank it after its equals).
int32_t logit_rank(std::span<const float> logits, int32_t token);

// One prompt_logprobs entry from the raw logits row of the position before
// `token`: its logprob (log_softmax, no temperature or penalties, as vLLM's
// default raw_logprobs mode), its rank and the top_n ids with logprobs
// (best first, ties by lower id; id -1 past a vocabulary smaller than top_n).
void compute_prompt_logprob(std::span<const float> logits, int32_t token, int top_n,
                            PromptLogprobs::Slot slot);

}  // namespace pagoda
