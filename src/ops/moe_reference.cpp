// Scalar twins of ops/moe.h (ref::moe_route, ref::moe_route_hashed,
// ref::moe_experts_forward):
// written for obviousness, by sorting and a per-token loop.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>
#include <vector>

#include "ops/reference.h"

namespace pagoda::ops::ref {

namespace {

// Indices 0..n-1 ordered by descending value, ties to the lower index.
std::vector<int> ranked(const std::vector<double>& v) {
  std::vector<int> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return v[a] > v[b]; });
  return idx;
}

// The router's scores of one token, with moe_route's f32 formulas.
std::vector<float> scores_of(const float* z, const MoeRouting& r) {
  const int E = r.num_experts;
  std::vector<float> s(E);
  if (r.scoring == MoeScoring::Sigmoid) {
    for (int e = 0; e < E; ++e) s[e] = 1.0f / (1.0f + std::exp(-z[e]));
  } else if (r.scoring == MoeScoring::SqrtSoftplus) {
    for (int e = 0; e < E; ++e) s[e] = std::sqrt(z[e] > 20.0f ? z[e] : std::log1p(std::exp(z[e])));
  } else {
    const float mx = *std::max_element(z, z + E);
    float sum = 0.0f;
    for (int e = 0; e < E; ++e) sum += (s[e] = std::exp(z[e] - mx));
    for (int e = 0; e < E; ++e) s[e] /= sum;
  }
  return s;
}

}  // namespace

void moe_route(const float* logits, int64_t num_tokens, const MoeRouting& r, int32_t* topk_ids,
               float* topk_weights) {
  const int E = r.num_experts, G = r.n_group, size = E / G;
  for (int64_t t = 0; t < num_tokens; ++t) {
    const std::vector<float> s = scores_of(logits + t * E, r);
    // Selection scores, as f32 sums (what the op compares).
    std::vector<double> b(E);
    for (int e = 0; e < E; ++e) b[e] = r.correction_bias ? s[e] + r.correction_bias[e] : s[e];
    std::vector<bool> allowed(E, true);
    if (r.topk_group < G) {
      std::vector<double> group(G);
      for (int g = 0; g < G; ++g) {
        std::vector<double> members(b.begin() + g * size, b.begin() + (g + 1) * size);
        std::sort(members.begin(), members.end(), std::greater<>());
        group[g] = r.group_score == MoeGroupScore::Max
                       ? members[0]
                       : double{static_cast<float>(members[0]) + static_cast<float>(members[1])};
      }
      const std::vector<int> order = ranked(group);
      for (int n = r.topk_group; n < G; ++n) {
        for (int i = 0; i < size; ++i) allowed[order[n] * size + i] = false;
      }
    }
    for (int e = 0; e < E; ++e) {
      if (!allowed[e]) b[e] = -INFINITY;
    }
    const std::vector<int> order = ranked(b);
    float sum = 0.0f;
    for (int j = 0; j < r.top_k; ++j) sum += s[order[j]];
    for (int j = 0; j < r.top_k; ++j) {
      topk_ids[t * r.top_k + j] = order[j];
      float w = s[order[j]];
      if (r.norm_topk_prob) w /= sum + 1e-20f;
      topk_weights[t * r.top_k + j] = w * r.routed_scaling_factor;
    }
  }
}

void moe_route_hashed(const float* logits, const int32_t* token_ids, int64_t num_tokens,
                      const int32_t* tid2eid, int64_t vocab, const MoeRouting& r,
                      int32_t* topk_ids, float* topk_weights) {
  const int k = r.top_k;
  for (int64_t t = 0; t < num_tokens; ++t) {
    const std::vector<float> s = scores_of(logits + t * r.num_experts, r);
    float sum = 0.0f;
    for (int j = 0; j < k; ++j) sum += s[tid2eid[int64_t{token_ids[t]} * k + j]];
    for (int j = 0; j < k; ++j) {
      const int32_t e = tid2eid[int64_t{token_ids[t]} * k + j];
      topk_ids[t * k + j] = e;
      float w = s[e];
      if (r.norm_topk_prob) w /= sum + 1e-20f;
      topk_weights[t * k + j] = w * r.routed_scaling_factor;
    }
  }
}

void moe_experts_forward(const float* x, int64_t num_tokens, const int32_t* topk_ids,
                         const float* topk_weights, int top_k, const MoeExpert* experts,
                         int num_experts, float* out, float swiglu_limit) {
  const int64_t hidden = experts[0].gate.cols;
  for (int64_t t = 0; t < num_tokens; ++t) {
    std::vector<double> acc(hidden, 0.0);
    for (int j = 0; j < top_k; ++j) {
      const int32_t e = topk_ids[t * top_k + j];
      if (e < 0) continue;
      const MoeExpert& ex = experts[e];
      const int64_t inter = ex.gate.rows;
      std::vector<float> gate_up(2 * inter), act(inter), y(hidden);
      ref::linear(x + t * hidden, 1, ex.gate, nullptr, gate_up.data());
      ref::linear(x + t * hidden, 1, ex.up, nullptr, gate_up.data() + inter);
      ref::silu_mul(gate_up.data(), 1, inter, act.data(), swiglu_limit);
      ref::linear(act.data(), 1, ex.down, nullptr, y.data());
      for (int64_t i = 0; i < hidden; ++i) acc[i] += double{topk_weights[t * top_k + j]} * y[i];
    }
    for (int64_t i = 0; i < hidden; ++i) out[t * hidden + i] = static_cast<float>(acc[i]);
  }
}

}  // namespace pagoda::ops::ref
