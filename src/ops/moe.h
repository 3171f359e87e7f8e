// Mixture-of-experts building blocks (DeepSeek V2/V3 style): the router's
// top-k selection, grouping a step's (token, expert) assignments by
// expert, and the routed experts' forward pass with each used expert run
// as one GEMM over its tokens. Scalar twins: ref::moe_route and
// ref::moe_experts_forward (ops/reference.h).
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "ops/ops.h"

namespace pagoda::ops {

// How router logits become expert scores.
enum class MoeScoring {
  Sigmoid,  // DeepSeek V3 (scoring_func "sigmoid")
  Softmax,  // DeepSeek V2 (scoring_func "softmax"), over all experts
  // DeepSeek V4 (scoring_func "sqrtsoftplus", spec §3.2.6): sqrt(softplus(z))
  // with softplus(z) = z for z > 20, else log1p(exp(z)) (torch's threshold).
  SqrtSoftplus,
};

// How a group of experts is scored for group-limited routing.
enum class MoeGroupScore {
  Top2Sum,  // sum of its two best selection scores (V3, topk_method "noaux_tc")
  Max,      // its best selection score (V2, topk_method "group_limited_greedy")
};

// Router settings, named as in the HF configs.
struct MoeRouting {
  int num_experts = 0;  // n_routed_experts
  int top_k = 0;        // num_experts_per_tok
  // Experts form n_group equal consecutive groups; only the topk_group best
  // groups may be chosen from (n_group = topk_group = 1: no limit).
  int n_group = 1;
  int topk_group = 1;
  MoeScoring scoring = MoeScoring::Sigmoid;
  MoeGroupScore group_score = MoeGroupScore::Top2Sum;
  // [num_experts] or null: added to the scores for selection only (groups
  // and top-k); the weights use the unbiased scores.
  const float* correction_bias = nullptr;
  // Weights divided by their sum (+ 1e-20, as HF) before the scaling.
  bool norm_topk_prob = true;
  // Every weight is multiplied by this, after the optional normalisation
  // (V3 does both; a V2 model that normalises passes 1 here).
  float routed_scaling_factor = 1.0f;
};

// Per token t: scores s = sigmoid(logits[t]) or softmax(logits[t]) (f32);
// selection scores b = s + bias; with groups, keep the topk_group groups
// of highest group score (the others are excluded outright, as vLLM's
// grouped_topk does; HF fills them with 0.0 instead, which picks the same
// experts whenever the chosen ones have b > 0); then the top_k experts by
// b among the kept groups. Ties go to the lower index, for groups and for
// experts. topk_ids[t, :] lists them by descending b; topk_weights[t, j] =
// s[id] (/ sum over the k, if norm_topk_prob) * routed_scaling_factor.
// logits: [num_tokens, num_experts]; outputs: [num_tokens, top_k].
void moe_route(const float* logits, int64_t num_tokens, const MoeRouting& routing,
               int32_t* topk_ids, float* topk_weights);

// Hash routing (DeepSeek V4's first num_hash_layers layers, spec §3.2.6):
// token t's experts are fixed by its token id, topk_ids[t, :] =
// tid2eid[token_ids[t], :] in the table's order (tid2eid: [vocab, top_k],
// distinct experts per row); the weights still come from the router's
// scores s (routing.scoring) of those experts: s[id] (/ their sum + 1e-20,
// if norm_topk_prob) * routed_scaling_factor. correction_bias and the group
// settings play no part (nothing is selected). A token id outside [0,
// vocab) or a table entry outside [0, num_experts) or repeated in its row
// is an error. logits: [num_tokens, num_experts].
void moe_route_hashed(const float* logits, const int32_t* token_ids, int64_t num_tokens,
                      const int32_t* tid2eid, int64_t vocab, const MoeRouting& routing,
                      int32_t* topk_ids, float* topk_weights);

// A step's assignments grouped by expert (a counting sort): expert e's
// assignments are [offsets[e], offsets[e + 1]) of tokens / weights, in
// ascending token order; used lists the experts with at least one, in
// ascending order. The vectors only grow, so reusing one ExpertGroups
// does not allocate in the steady state.
struct ExpertGroups {
  std::vector<int32_t> offsets;  // [num_experts + 1]
  std::vector<int32_t> tokens;   // token row of each assignment
  std::vector<float> weights;    // its routing weight
  std::vector<int32_t> used;     // experts with tokens
  int num_experts = 0;
};

// Groups topk_ids / topk_weights ([num_tokens, top_k]) by expert. A
// negative id is no assignment (e.g. an expert another rank owns); ids
// must be < num_experts and a token may name an expert once.
void group_by_expert(const int32_t* topk_ids, const float* topk_weights, int64_t num_tokens,
                     int top_k, int num_experts, ExpertGroups& groups);

// Expected number of distinct experts a step of num_tokens tokens reads in
// one MoE layer (moe_experts_forward runs each used expert once), if each
// token picks top_k of num_experts with every expert equally likely and
// tokens independent: an expert is missed by one token with probability
// 1 - top_k / num_experts, so num_experts * (1 - (1 - top_k/num_experts)^n).
// 1 token: top_k; many: all. Routing that sends neighbouring tokens to the
// same experts (a trained model) reads fewer: this is then an upper bound.
inline double expected_distinct_experts(int num_experts, int top_k, int64_t num_tokens) {
  if (num_experts <= 0 || num_tokens <= 0) return 0;
  const double miss = 1.0 - static_cast<double>(top_k) / num_experts;
  return num_experts * (1.0 - std::pow(miss, static_cast<double>(num_tokens)));
}

// One routed expert's SwiGLU MLP, HF layout: gate and up [inter, hidden],
// down [hidden, inter]; any Matrix dtype ops::linear takes.
struct MoeExpert {
  Matrix gate, up, down;
};

// Buffers of moe_experts_forward, reused between calls (they only grow).
struct MoeScratch {
  ExpertGroups groups;
  std::vector<float> x;        // an expert's gathered token rows [n, hidden]
  std::vector<float> gate_up;  // [n, 2 * inter]
  std::vector<float> act;      // [n, inter]
  std::vector<float> y;        // [n, hidden]
};

// out[t, :] = sum over t's assignments (topk_ids[t, j] >= 0) of
// topk_weights[t, j] * down(silu(gate x_t) * up x_t) with that expert's
// matrices. swiglu_limit L > 0 (DeepSeek V4) clamps before the product,
// as ops::silu_mul does: silu(min(gate x_t, L)) * clamp(up x_t, -L, L);
// 0: no clamp. (The routing weight multiplies the expert's output, which
// is the same real number as V4's down(weight * h) up to rounding.) Runs each expert that has tokens once, as one linear_multi
// (gate and up), silu_mul and linear (down) over all its tokens, so only
// the used experts' weights are read. Each token's terms are added in
// ascending expert id order and each linear row is independent of the
// other rows, so a token's output does not depend on the rest of the
// batch (bit for bit). x, out: [num_tokens, hidden] (out must not alias
// x); experts: [num_experts].
// After the call scratch.groups holds the step's grouping (its `used`
// list: the experts whose weights were read, e.g. for a bytes-per-step
// report).
void moe_experts_forward(const float* x, int64_t num_tokens, const int32_t* topk_ids,
                         const float* topk_weights, int top_k, const MoeExpert* experts,
                         int num_experts, MoeScratch& scratch, float* out,
                         float swiglu_limit = 0.0f);

// The same step with a caller-supplied expert, for experts that are not
// three Matrix linears (other weight formats, a tensor-parallel slice whose
// partial outputs the caller all-reduces afterwards, ...):
// run(expert, xe, n, ye) must write ye [n, hidden] = expert's output for
// the n rows of xe [n, hidden], each row independent of the others (so
// the batch-composition rule above still holds). Only experts with tokens
// are run, in ascending id order; scratch.x and scratch.y hold xe and ye.
using MoeExpertFn = void (*)(void* ctx, int expert, const float* xe, int64_t n, float* ye);
void moe_experts_forward_with(const float* x, int64_t num_tokens, int64_t hidden,
                              const int32_t* topk_ids, const float* topk_weights, int top_k,
                              int num_experts, MoeExpertFn run, void* ctx, MoeScratch& scratch,
                              float* out);

// moe_experts_forward_with for a callable run(int, const float*, int64_t,
// float*) (e.g. a lambda).
template <typename Fn>
void moe_experts_forward_with(const float* x, int64_t num_tokens, int64_t hidden,
                              const int32_t* topk_ids, const float* topk_weights, int top_k,
                              int num_experts, Fn&& run, MoeScratch& scratch, float* out) {
  using F = std::remove_reference_t<Fn>;
  moe_experts_forward_with(
      x, num_tokens, hidden, topk_ids, topk_weights, top_k, num_experts,
      [](void* ctx, int e, const float* xe, int64_t n, float* ye) {
        (*static_cast<F*>(ctx))(e, xe, n, ye);
      },
      const_cast<void*>(static_cast<const void*>(&run)), scratch, out);
}

}  // namespace pagoda::ops
