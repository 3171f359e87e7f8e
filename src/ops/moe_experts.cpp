// group_by_expert and moe_experts_forward (ops/moe.h): the routed experts
// of a step run expert by expert, each as one GEMM over all its tokens
// (gather rows -> gate/up -> silu_mul -> down -> weighted scatter-add), so
// an expert's weights are streamed once per step however many tokens use
// it, and experts no token chose are not read at all.
#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/parallel.h"
#include "ops/moe.h"

namespace pagoda::ops {

void group_by_expert(const int32_t* topk_ids, const float* topk_weights, int64_t num_tokens,
                     int top_k, int num_experts, ExpertGroups& g) {
  PAGODA_CHECK(num_experts > 0 && top_k > 0, "group_by_expert: {} experts, top_k {}", num_experts,
               top_k);
  g.num_experts = num_experts;
  const int64_t n = num_tokens * top_k;
  // Vectors only grow: resize within capacity does not allocate.
  g.offsets.assign(static_cast<size_t>(num_experts) + 1, 0);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t e = topk_ids[i];
    PAGODA_CHECK(e < num_experts, "group_by_expert: expert id {} of {} experts", e, num_experts);
    if (e >= 0) ++g.offsets[e + 1];
  }
  g.used.clear();
  for (int e = 0; e < num_experts; ++e) {
    if (g.offsets[e + 1] > 0) g.used.push_back(e);
    g.offsets[e + 1] += g.offsets[e];
  }
  const auto total = static_cast<size_t>(g.offsets[num_experts]);
  if (g.tokens.size() < total) {
    g.tokens.resize(total);
    g.weights.resize(total);
  }
  // Stable placement in token order: offsets[e] walks forward as expert e
  // fills, then is restored by shifting back one slot.
  for (int64_t i = 0; i < n; ++i) {
    const int32_t e = topk_ids[i];
    if (e < 0) continue;
    const int32_t at = g.offsets[e]++;
    g.tokens[at] = static_cast<int32_t>(i / top_k);
    g.weights[at] = topk_weights[i];
  }
  for (int e = num_experts; e > 0; --e) g.offsets[e] = g.offsets[e - 1];
  g.offsets[0] = 0;
  // A token naming one expert twice would be two rows scattered into one
  // output row at once; its rows are adjacent here, so the check is cheap.
  for (int e : g.used) {
    for (int32_t i = g.offsets[e] + 1; i < g.offsets[e + 1]; ++i)
      PAGODA_CHECK(g.tokens[i] != g.tokens[i - 1],
                   "group_by_expert: token {} names expert {} twice", g.tokens[i], e);
  }
}

namespace {

void grow(std::vector<float>& v, int64_t n) {
  if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
}

}  // namespace

void moe_experts_forward_with(const float* x, int64_t num_tokens, int64_t hidden,
                              const int32_t* topk_ids, const float* topk_weights, int top_k,
                              int num_experts, MoeExpertFn run, void* ctx, MoeScratch& s,
                              float* out) {
  if (num_tokens <= 0) return;
  std::memset(out, 0, sizeof(float) * static_cast<size_t>(num_tokens * hidden));
  group_by_expert(topk_ids, topk_weights, num_tokens, top_k, num_experts, s.groups);
  const ExpertGroups& g = s.groups;
  const int64_t rows_per_thread = std::max<int64_t>(1, 16384 / std::max<int64_t>(hidden, 1));
  // Experts in ascending id order: each token's terms are added to its
  // output row in that order, whatever other tokens the batch holds.
  for (int e : g.used) {
    const int32_t first = g.offsets[e];
    const int64_t n = g.offsets[e + 1] - first;
    const int32_t* tokens = g.tokens.data() + first;
    const float* weights = g.weights.data() + first;
    grow(s.x, n * hidden);
    grow(s.y, n * hidden);
    float* xe = s.x.data();
    parallel_for(n, rows_per_thread, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        std::memcpy(xe + r * hidden, x + int64_t{tokens[r]} * hidden,
                    sizeof(float) * static_cast<size_t>(hidden));
    });
    run(ctx, e, xe, n, s.y.data());
    // Each row goes to a different token (group_by_expert checks), so rows
    // scatter in parallel.
    const float* ye = s.y.data();
    parallel_for(n, rows_per_thread, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        float* o = out + int64_t{tokens[r]} * hidden;
        const float* y = ye + r * hidden;
        const float w = weights[r];
        for (int64_t i = 0; i < hidden; ++i) o[i] += w * y[i];
      }
    });
  }
}

void moe_experts_forward(const float* x, int64_t num_tokens, const int32_t* topk_ids,
                         const float* topk_weights, int top_k, const MoeExpert* experts,
                         int num_experts, MoeScratch& s, float* out, float swiglu_limit) {
  PAGODA_CHECK(num_experts > 0, "moe_experts_forward: no experts");
  const int64_t hidden = experts[0].gate.cols;
  auto swiglu = [&](int e, const float* xe, int64_t n, float* ye) {
    const MoeExpert& ex = experts[e];
    const int64_t inter = ex.gate.rows;
    PAGODA_CHECK(ex.gate.data && ex.up.data && ex.down.data,
                 "moe_experts_forward: expert {} has tokens but no weights", e);
    PAGODA_CHECK(ex.gate.cols == hidden && ex.up.cols == hidden && ex.up.rows == inter &&
                     ex.down.rows == hidden && ex.down.cols == inter,
                 "moe_experts_forward: expert {} shapes gate [{}, {}] up [{}, {}] down [{}, {}] "
                 "for hidden {}",
                 e, ex.gate.rows, ex.gate.cols, ex.up.rows, ex.up.cols, ex.down.rows, ex.down.cols,
                 hidden);
    grow(s.gate_up, n * 2 * inter);
    grow(s.act, n * inter);
    // gate and up side by side in one [n, 2 * inter] buffer (silu_mul's
    // layout), from one pass over x.
    const LinearOutput gu[2] = {{&ex.gate, nullptr, s.gate_up.data(), 2 * inter},
                                {&ex.up, nullptr, s.gate_up.data() + inter, 2 * inter}};
    linear_multi(xe, n, gu, 2);
    silu_mul(s.gate_up.data(), n, inter, s.act.data(), swiglu_limit);
    linear(s.act.data(), n, ex.down, nullptr, ye);
  };
  moe_experts_forward_with(x, num_tokens, hidden, topk_ids, topk_weights, top_k, num_experts,
                           swiglu, s, out);
}

}  // namespace pagoda::ops
