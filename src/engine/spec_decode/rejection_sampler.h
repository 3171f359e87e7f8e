// Verifies a request's draft tokens against the target model's logits rows
// (Leviathan et al. 2023, "Fast Inference from Transformers via Speculative
// Decoding"; vLLM's RejectionSampler). Row j holds the target's logits at
// the position that predicts draft j (row k, after the last draft, gives
// the bonus token).
//
// Each row is processed exactly as non-speculative sampling would process
// it at that point of the output (min_tokens, allowed ids, bad words,
// logit_bias, penalties, with the drafts before it counted as output), so:
//  * greedy: the drafts are accepted while each equals the argmax of its
//    row; the first mismatch emits the argmax instead. The emitted tokens
//    are token for token those of greedy decoding without speculation.
//  * temperature > 0: with p the target's filtered distribution (sampler.h:
//    temperature, top-k, min-p, top-p) and q the proposer's, draft d is
//    accepted with probability min(1, p(d) / q(d)); on rejection a token is
//    drawn from max(0, p - q) renormalized and verification stops; when all
//    k are accepted a bonus token is drawn from row k. Each emitted token
//    then follows the target distribution. A proposer that drafts one token
//    deterministically (n-gram lookup) has q a point mass: accept with
//    probability p(d), else draw from p without d.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/sampler.h"

namespace pagoda {

struct VerifyInput {
  std::span<float* const> rows;  // k + 1 rows of vocab logits (scratch: changed)
  int64_t vocab_size = 0;
  std::span<const int32_t> draft;  // k tokens
  // Per draft position, the proposer's distribution q; empty: q is a point
  // mass on the draft token.
  std::span<const FilteredDistribution> draft_dists;
  const SamplingParams* params = nullptr;
  std::span<const int32_t> prompt_ids, output_ids;  // output before the drafts
  std::span<const int32_t> stop_ids;                // as sample_token's
};

// Appends the emitted tokens (accepted drafts, then one corrected or bonus
// token: 1 to k + 1 tokens) to `out`, with the target's raw logprobs when
// params->logprobs >= 0; returns how many drafts were accepted.
int32_t verify_draft_tokens(const VerifyInput& in, SequenceRng& rng, std::vector<SampledToken>* out);

}  // namespace pagoda
