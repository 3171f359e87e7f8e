#include "engine/spec_decode/rejection_sampler.h"

#include <algorithm>

#include "core/error.h"

namespace pagoda {

namespace {

// A draw from max(0, p - q) renormalized (q a point mass on `draft` when
// `q` is null). Its mass is positive whenever the draft was rejected.
int32_t draw_residual(const FilteredDistribution& p, const FilteredDistribution* q, int32_t draft,
                      std::mt19937_64& rng) {
  thread_local FilteredDistribution residual;
  residual.ids.clear();
  residual.probs.clear();
  residual.total = 0;
  for (size_t i = 0; i < p.ids.size(); ++i) {
    const int32_t id = p.ids[i];
    const double q_id = q ? q->prob(id) : (id == draft ? 1.0 : 0.0);
    const double r = p.probs[i] / p.total - q_id;
    if (r <= 0) continue;
    residual.ids.push_back(id);
    residual.probs.push_back(r);
    residual.total += r;
  }
  // Rounding can leave nothing (p == q up to ulps, so rejection had
  // probability ~0): p itself is then the right distribution.
  return residual.ids.empty() ? draw_token(p, rng) : draw_token(residual, rng);
}

}  // namespace

int32_t verify_draft_tokens(const VerifyInput& in, SequenceRng& rng,
                            std::vector<SampledToken>* out) {
  const SamplingParams& params = *in.params;
  const auto k = static_cast<int64_t>(in.draft.size());
  PAGODA_CHECK(static_cast<int64_t>(in.rows.size()) == k + 1, "{} rows for {} drafts",
               in.rows.size(), k);
  PAGODA_CHECK(in.draft_dists.empty() || static_cast<int64_t>(in.draft_dists.size()) == k,
               "{} draft distributions for {} drafts", in.draft_dists.size(), k);
  // The output as sampling at row j sees it: the real output, then drafts [0, j).
  thread_local std::vector<int32_t> context;
  context.assign(in.output_ids.begin(), in.output_ids.end());
  thread_local std::vector<float> raw;
  thread_local FilteredDistribution p;
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  for (int64_t j = 0; j <= k; ++j) {
    std::span<float> logits(in.rows[static_cast<size_t>(j)], static_cast<size_t>(in.vocab_size));
    if (params.logprobs >= 0) raw.assign(logits.begin(), logits.end());
    apply_logits_processors(logits, params, in.prompt_ids, context, in.stop_ids);
    SampledToken t;
    bool accepted = false;
    if (params.greedy()) {
      t.token = greedy_token(logits);
      accepted = j < k && t.token == in.draft[static_cast<size_t>(j)];
    } else {
      filtered_distribution(logits, params, &p);
      if (j == k) {
        t.token = draw_token(p, rng.engine());  // the bonus token
      } else {
        const int32_t d = in.draft[static_cast<size_t>(j)];
        const FilteredDistribution* q =
            in.draft_dists.empty() ? nullptr : &in.draft_dists[static_cast<size_t>(j)];
        const double q_d = q ? q->prob(d) : 1.0;
        // u < p/q, written without the division (q_d may be 0 for a draft
        // the proposer's own filters removed: then always accepted, as p/q
        // is infinite; a draft the target filtered out has p = 0: rejected).
        accepted = uniform(rng.engine()) * q_d < p.prob(d);
        t.token = accepted ? d : draw_residual(p, q, d, rng.engine());
      }
    }
    if (params.logprobs >= 0 && t.token != kNoToken) fill_logprobs(raw, params.logprobs, t);
    out->push_back(std::move(t));
    if (!accepted) return static_cast<int32_t>(j);
    context.push_back(out->back().token);
  }
  PAGODA_CHECK(false, "verification ran past the bonus row");
  return static_cast<int32_t>(k);
}

}  // namespace pagoda
