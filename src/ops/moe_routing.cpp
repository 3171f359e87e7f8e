// moe_route (ops/moe.h): the router's scores, group limiting and top-k;
// moe_route_hashed: the same scores and weights for experts fixed per token.
// Per token it is O(num_experts * top_k) scalar work, far below the
// experts' GEMMs, so it favours plain, exactly specified code.
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/parallel.h"
#include "ops/moe.h"

namespace pagoda::ops {

namespace {

// Whether selection score a at index i ranks before b at index j: higher
// first, ties to the lower index.
inline bool ranks_before(float a, int i, float b, int j) { return a > b || (a == b && i < j); }

// The router's scores of one token's logits z[0..E) (MoeScoring), in f32.
void score_experts(const float* z, int E, MoeScoring scoring, float* scores) {
  switch (scoring) {
    case MoeScoring::Sigmoid:
      for (int e = 0; e < E; ++e) scores[e] = 1.0f / (1.0f + std::exp(-z[e]));
      return;
    case MoeScoring::SqrtSoftplus:
      // torch.nn.functional.softplus: x itself above the threshold 20,
      // where log1p(exp(x)) equals x to f32 precision anyway.
      for (int e = 0; e < E; ++e)
        scores[e] = std::sqrt(z[e] > 20.0f ? z[e] : std::log1p(std::exp(z[e])));
      return;
    case MoeScoring::Softmax: {
      float mx = z[0];
      for (int e = 1; e < E; ++e) mx = z[e] > mx ? z[e] : mx;
      float sum = 0.0f;
      for (int e = 0; e < E; ++e) sum += (scores[e] = std::exp(z[e] - mx));
      for (int e = 0; e < E; ++e) scores[e] /= sum;
      return;
    }
  }
}

// w[j] = scores[ids[j]], normalised and scaled as MoeRouting says.
void route_weights(const float* scores, const int32_t* ids, const MoeRouting& r, float* w) {
  float sum = 0.0f;
  for (int j = 0; j < r.top_k; ++j) sum += (w[j] = scores[ids[j]]);
  // As HF: w / (sum + 1e-20), then * routed_scaling_factor.
  for (int j = 0; j < r.top_k; ++j) {
    if (r.norm_topk_prob) w[j] /= sum + 1e-20f;
    w[j] *= r.routed_scaling_factor;
  }
}

// A thread's scratch of at least n floats, grown once.
float* thread_buffer(size_t n) {
  thread_local std::vector<float> buffer;
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

}  // namespace

void moe_route(const float* logits, int64_t num_tokens, const MoeRouting& r, int32_t* topk_ids,
               float* topk_weights) {
  const int E = r.num_experts, k = r.top_k;
  PAGODA_CHECK(E > 0 && k > 0 && k <= E, "moe_route: top_k {} of {} experts", k, E);
  PAGODA_CHECK(r.n_group > 0 && E % r.n_group == 0 && r.topk_group > 0 && r.topk_group <= r.n_group,
               "moe_route: {} experts in {} groups, {} kept", E, r.n_group, r.topk_group);
  const int group_size = E / r.n_group;
  PAGODA_CHECK(int64_t{r.topk_group} * group_size >= k,
               "moe_route: {} kept groups of {} experts cannot hold top_k {}", r.topk_group,
               group_size, k);
  PAGODA_CHECK(r.group_score == MoeGroupScore::Max || group_size >= 2 || r.n_group == 1,
               "moe_route: top-2 group scores need groups of 2 or more experts");
  const bool limit_groups = r.topk_group < r.n_group;
  parallel_for(num_tokens, 64, [&](int64_t t0, int64_t t1) {
    float* scores = thread_buffer(static_cast<size_t>(2 * E + r.n_group));
    float* choice = scores + E;
    float* group = choice + E;
    for (int64_t t = t0; t < t1; ++t) {
      score_experts(logits + t * E, E, r.scoring, scores);
      for (int e = 0; e < E; ++e)
        choice[e] = r.correction_bias ? scores[e] + r.correction_bias[e] : scores[e];
      if (limit_groups) {
        for (int g = 0; g < r.n_group; ++g) {
          const float* c = choice + g * group_size;
          if (r.group_score == MoeGroupScore::Max) {
            float best = c[0];
            for (int i = 1; i < group_size; ++i) best = c[i] > best ? c[i] : best;
            group[g] = best;
          } else {  // the two largest values (a tie counts twice, as topk(2) does)
            float first = -INFINITY, second = -INFINITY;
            for (int i = 0; i < group_size; ++i) {
              if (c[i] > first) {
                second = first;
                first = c[i];
              } else if (c[i] > second) {
                second = c[i];
              }
            }
            group[g] = first + second;
          }
        }
        // Mark the kept groups (+inf) by repeated best pick, then exclude
        // the experts of every other group from the choice.
        for (int n = 0; n < r.topk_group; ++n) {
          int best = -1;
          for (int g = 0; g < r.n_group; ++g) {
            if (group[g] == INFINITY) continue;
            if (best < 0 || ranks_before(group[g], g, group[best], best)) best = g;
          }
          group[best] = INFINITY;
        }
        for (int g = 0; g < r.n_group; ++g) {
          if (group[g] == INFINITY) continue;
          for (int i = 0; i < group_size; ++i) choice[g * group_size + i] = -INFINITY;
        }
      }
      // Top-k by repeated best pick (k is small): an expert once taken is
      // marked NaN, which never ranks before anything.
      int32_t* ids = topk_ids + t * k;
      float* w = topk_weights + t * k;
      for (int j = 0; j < k; ++j) {
        int best = -1;
        for (int e = 0; e < E; ++e) {
          if (std::isnan(choice[e])) continue;
          if (best < 0 || ranks_before(choice[e], e, choice[best], best)) best = e;
        }
        ids[j] = best;
        choice[best] = NAN;
      }
      route_weights(scores, ids, r, w);
    }
  });
}

void moe_route_hashed(const float* logits, const int32_t* token_ids, int64_t num_tokens,
                      const int32_t* tid2eid, int64_t vocab, const MoeRouting& r,
                      int32_t* topk_ids, float* topk_weights) {
  const int E = r.num_experts, k = r.top_k;
  PAGODA_CHECK(E > 0 && k > 0 && k <= E, "moe_route_hashed: top_k {} of {} experts", k, E);
  // Checked before any work, so a bad id fails the same way on any thread.
  for (int64_t t = 0; t < num_tokens; ++t) {
    const int32_t id = token_ids[t];
    PAGODA_CHECK(id >= 0 && id < vocab, "moe_route_hashed: token id {} of a vocab of {}", id,
                 vocab);
    const int32_t* row = tid2eid + int64_t{id} * k;
    for (int j = 0; j < k; ++j) {
      PAGODA_CHECK(row[j] >= 0 && row[j] < E,
                   "moe_route_hashed: tid2eid[{}] names expert {} of {}", id, row[j], E);
      for (int i = 0; i < j; ++i)
        PAGODA_CHECK(row[i] != row[j], "moe_route_hashed: tid2eid[{}] names expert {} twice", id,
                     row[j]);
    }
  }
  parallel_for(num_tokens, 64, [&](int64_t t0, int64_t t1) {
    float* scores = thread_buffer(static_cast<size_t>(E));
    for (int64_t t = t0; t < t1; ++t) {
      score_experts(logits + t * E, E, r.scoring, scores);
      int32_t* ids = topk_ids + t * k;
      const int32_t* row = tid2eid + int64_t{token_ids[t]} * k;
      for (int j = 0; j < k; ++j) ids[j] = row[j];
      route_weights(scores, ids, r, topk_weights + t * k);
    }
  });
}

}  // namespace pagoda::ops
