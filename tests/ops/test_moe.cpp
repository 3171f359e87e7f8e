// MoE building blocks (ops/moe.h): moe_route against its reference and
// against a rank-counting selection written here, on crafted cases that
// pin down group limiting (a group with one high expert loses to a group
// of good ones under top-2 sums, wins under max), the correction bias
// (changes the choice, not the weights), normalisation and scaling, and
// ties; group_by_expert against a naive grouping; moe_experts_forward on
// every ISA against the per-token reference (f32, bf16 and FP8 block-scaled
// experts), a token alone == its row in the batch (bit for bit), 1 thread
// == 2, and unused experts never read.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "ops/moe.h"
#include "ops/reference.h"
#include "ops_test_util.h"

namespace pagoda::ops::testing {
namespace {

struct Routed {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

Routed route(const std::vector<float>& logits, const MoeRouting& r) {
  const int64_t T = static_cast<int64_t>(logits.size()) / r.num_experts;
  Routed out{std::vector<int32_t>(T * r.top_k, -1), std::vector<float>(T * r.top_k, NAN)};
  moe_route(logits.data(), T, r, out.ids.data(), out.weights.data());
  return out;
}

// Selection by rank counting, from the definition: an item is kept when
// fewer than `keep` items rank before it (higher value, or equal value and
// lower index); the kept items ordered by that rank.
std::vector<int> select_by_rank(const std::vector<double>& v, int keep) {
  const int n = static_cast<int>(v.size());
  std::vector<int> out(keep, -1);
  for (int i = 0; i < n; ++i) {
    int before = 0;
    for (int j = 0; j < n; ++j) before += v[j] > v[i] || (v[j] == v[i] && j < i);
    if (before < keep) out[before] = i;
  }
  return out;
}

// The routing of one token computed here: scores in f64 from the logits,
// groups and experts by select_by_rank, weights from the unbiased scores.
Routed independent_route(const float* z, const MoeRouting& r) {
  const int E = r.num_experts, size = E / r.n_group;
  std::vector<double> s(E), b(E);
  if (r.scoring == MoeScoring::Sigmoid) {
    for (int e = 0; e < E; ++e) s[e] = 1.0 / (1.0 + std::exp(-double{z[e]}));
  } else {
    double sum = 0;
    for (int e = 0; e < E; ++e) sum += std::exp(double{z[e]});
    for (int e = 0; e < E; ++e) s[e] = std::exp(double{z[e]}) / sum;
  }
  for (int e = 0; e < E; ++e) b[e] = s[e] + (r.correction_bias ? r.correction_bias[e] : 0.0);
  std::vector<double> group(r.n_group);
  for (int g = 0; g < r.n_group; ++g) {
    std::vector<double> m(b.begin() + g * size, b.begin() + (g + 1) * size);
    const std::vector<int> top = select_by_rank(m, std::min(2, size));
    group[g] = r.group_score == MoeGroupScore::Max ? m[top[0]] : m[top[0]] + m[top[1]];
  }
  const std::vector<int> kept = select_by_rank(group, r.topk_group);
  std::vector<double> candidates(E, -INFINITY);
  for (int g : kept) {
    for (int i = 0; i < size; ++i) candidates[g * size + i] = b[g * size + i];
  }
  Routed out;
  double sum = 0;
  for (int e : select_by_rank(candidates, r.top_k)) {
    out.ids.push_back(e);
    sum += s[e];
  }
  for (int e : out.ids)
    out.weights.push_back(
        static_cast<float>((r.norm_topk_prob ? s[e] / sum : s[e]) * r.routed_scaling_factor));
  return out;
}

MoeRouting v3_like(int E, int groups, int kept, int k, const float* bias) {
  MoeRouting r;
  r.num_experts = E;
  r.top_k = k;
  r.n_group = groups;
  r.topk_group = kept;
  r.scoring = MoeScoring::Sigmoid;
  r.group_score = MoeGroupScore::Top2Sum;
  r.correction_bias = bias;
  r.norm_topk_prob = true;
  r.routed_scaling_factor = 2.5f;
  return r;
}

TEST(MoeRoute, MatchesReferenceAndIndependentSelection) {
  std::mt19937 rng(1);
  const auto bias64 = random_vec(64, rng, 0.3f);
  std::vector<MoeRouting> configs;
  configs.push_back(v3_like(64, 8, 4, 8, bias64.data()));  // V3 shape, scaled down
  configs.push_back(v3_like(64, 8, 3, 6, nullptr));
  MoeRouting v2 = v3_like(32, 4, 2, 6, nullptr);  // V2: softmax, max group score
  v2.scoring = MoeScoring::Softmax;
  v2.group_score = MoeGroupScore::Max;
  v2.routed_scaling_factor = 1.0f;
  configs.push_back(v2);
  MoeRouting plain = v3_like(16, 1, 1, 2, nullptr);  // no groups, no normalisation
  plain.scoring = MoeScoring::Softmax;
  plain.norm_topk_prob = false;
  plain.routed_scaling_factor = 16.0f;
  configs.push_back(plain);
  MoeRouting one = v3_like(8, 1, 1, 1, bias64.data());  // top-1
  configs.push_back(one);
  for (size_t c = 0; c < configs.size(); ++c) {
    const MoeRouting& r = configs[c];
    SCOPED_TRACE("config " + std::to_string(c));
    const int T = 57;
    const auto logits = random_vec(size_t(T) * r.num_experts, rng, 2.0f);
    const Routed got = route(logits, r);
    Routed want{std::vector<int32_t>(T * r.top_k), std::vector<float>(T * r.top_k)};
    ref::moe_route(logits.data(), T, r, want.ids.data(), want.weights.data());
    EXPECT_EQ(got.ids, want.ids);
    expect_close(got.weights, want.weights, 1e-6f, "weights vs reference");
    for (int t = 0; t < T; ++t) {
      const Routed ind = independent_route(logits.data() + t * r.num_experts, r);
      const std::vector<int32_t> ids(got.ids.begin() + t * r.top_k,
                                     got.ids.begin() + (t + 1) * r.top_k);
      const std::vector<float> w(got.weights.begin() + t * r.top_k,
                                 got.weights.begin() + (t + 1) * r.top_k);
      ASSERT_EQ(ids, ind.ids) << "token " << t;
      expect_close(w, ind.weights, 1e-5f, "weights vs independent, token " + std::to_string(t));
    }
  }
}

TEST(MoeRoute, GroupLimitExcludesAGroupWithOneHighExpert) {
  // 4 groups of 4, keep 2, top 2. Group 0: one expert far ahead (sigmoid
  // ~0.993) and three near 0: top-2 sum ~1.0. Group 1: four at 0.73 (sum
  // 1.46), group 2: four at 0.62 (1.24), group 3: 0.27 (0.54). Top-2 sums
  // keep groups 1 and 2, so the best single expert (0) is not chosen and
  // group 1's equal experts go lowest index first; max scores keep groups
  // 0 and 1 instead.
  std::vector<float> z = {5, -5, -5, -5, 1, 1, 1, 1, 0.5, 0.5, 0.5, 0.5, -1, -1, -1, -1};
  MoeRouting r = v3_like(16, 4, 2, 2, nullptr);
  const Routed top2 = route(z, r);
  EXPECT_EQ(top2.ids, (std::vector<int32_t>{4, 5}));
  EXPECT_FLOAT_EQ(top2.weights[0], 1.25f);  // equal scores: half of 2.5 each
  EXPECT_FLOAT_EQ(top2.weights[1], 1.25f);
  r.group_score = MoeGroupScore::Max;
  EXPECT_EQ(route(z, r).ids, (std::vector<int32_t>{0, 4}));
  // No group limit: the two best experts overall.
  r.n_group = r.topk_group = 1;
  EXPECT_EQ(route(z, r).ids, (std::vector<int32_t>{0, 4}));
}

TEST(MoeRoute, BiasChangesTheChoiceButNotTheWeights) {
  // Expert 7 scores lowest, but its bias lifts it into the top 2; its
  // weight comes from its own (unbiased) sigmoid.
  std::vector<float> z = {2.0f, 1.0f, 0.5f, 0.0f, -0.5f, -1.0f, -1.5f, -2.0f};
  std::vector<float> bias(8, 0.0f);
  bias[7] = 0.9f;
  MoeRouting r = v3_like(8, 1, 1, 2, nullptr);
  EXPECT_EQ(route(z, r).ids, (std::vector<int32_t>{0, 1}));
  r.correction_bias = bias.data();
  const Routed biased = route(z, r);
  EXPECT_EQ(biased.ids, (std::vector<int32_t>{7, 0}));  // 0.119 + 0.9 > 0.881
  const double s0 = 1 / (1 + std::exp(-2.0)), s7 = 1 / (1 + std::exp(2.0));
  EXPECT_NEAR(biased.weights[0], 2.5 * s7 / (s0 + s7), 1e-6);
  EXPECT_NEAR(biased.weights[1], 2.5 * s0 / (s0 + s7), 1e-6);
  // Bias also decides the groups: lifting group 1's second expert makes its
  // top-2 sum win.
  std::vector<float> zg = {3, 0, 0, 0, 0, 0, 0, 0};
  std::vector<float> bg(8, 0.0f);
  MoeRouting rg = v3_like(8, 2, 1, 1, bg.data());
  EXPECT_EQ(route(zg, rg).ids, (std::vector<int32_t>{0}));
  bg[5] = bg[6] = 0.5f;  // group 1: top-2 sum 2.0 vs group 0: 0.95 + 0.5
  EXPECT_EQ(route(zg, rg).ids, (std::vector<int32_t>{5}));
}

TEST(MoeRoute, WeightsSumToTheScalingFactorAndTiesGoToTheLowerIndex) {
  std::mt19937 rng(4);
  const MoeRouting r = v3_like(32, 4, 2, 4, nullptr);
  const auto logits = random_vec(size_t(20) * 32, rng);
  const Routed got = route(logits, r);
  for (int t = 0; t < 20; ++t) {
    double sum = 0;
    for (int j = 0; j < 4; ++j) sum += got.weights[t * 4 + j];
    EXPECT_NEAR(sum, 2.5, 1e-5) << "token " << t;
  }
  const std::vector<float> flat(32, 0.25f);  // all equal: groups 0, 1; experts 0..3
  EXPECT_EQ(route(flat, r).ids, (std::vector<int32_t>{0, 1, 2, 3}));
}

TEST(MoeRoute, RefusesImpossibleSettings) {
  std::vector<float> z(16, 0.0f);
  std::vector<int32_t> ids(8);
  std::vector<float> w(8);
  MoeRouting r = v3_like(16, 4, 1, 6, nullptr);  // 1 group of 4 cannot hold 6
  EXPECT_ANY_THROW(moe_route(z.data(), 1, r, ids.data(), w.data()));
  r = v3_like(16, 3, 1, 2, nullptr);  // 16 experts in 3 groups
  EXPECT_ANY_THROW(moe_route(z.data(), 1, r, ids.data(), w.data()));
}

TEST(GroupByExpert, MatchesNaiveGrouping) {
  std::mt19937 rng(2);
  const int T = 40, k = 3, E = 10;
  std::vector<int32_t> ids(T * k);
  std::vector<float> w(T * k);
  for (int t = 0; t < T; ++t) {
    std::vector<int32_t> perm(E);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int j = 0; j < k; ++j) {
      ids[t * k + j] = (t % 7 == 3 && j == 1) ? -1 : perm[j];  // some skipped
      w[t * k + j] = static_cast<float>(t * 10 + j);
    }
  }
  ExpertGroups g;
  for (int pass = 0; pass < 2; ++pass) {  // a reused ExpertGroups gives the same
    group_by_expert(ids.data(), w.data(), T, k, E, g);
    std::vector<int32_t> used;
    for (int e = 0; e < E; ++e) {
      std::vector<int32_t> tokens;
      std::vector<float> weights;
      for (int i = 0; i < T * k; ++i) {
        if (ids[i] == e) tokens.push_back(i / k), weights.push_back(w[i]);
      }
      if (!tokens.empty()) used.push_back(e);
      ASSERT_EQ(g.offsets[e + 1] - g.offsets[e], static_cast<int>(tokens.size())) << e;
      EXPECT_TRUE(std::equal(tokens.begin(), tokens.end(), g.tokens.begin() + g.offsets[e]));
      EXPECT_TRUE(std::equal(weights.begin(), weights.end(), g.weights.begin() + g.offsets[e]));
    }
    EXPECT_EQ(g.used, used);
  }
  ids[4] = ids[3];  // token 1 names one expert twice
  EXPECT_ANY_THROW(group_by_expert(ids.data(), w.data(), T, k, E, g));
  ids[4] = E;  // out of range
  EXPECT_ANY_THROW(group_by_expert(ids.data(), w.data(), T, k, E, g));
}

class MoeExperts : public IsaTest {};

// num_experts random experts (hidden H, inter I) in f32 or bf16.
struct Experts {
  std::vector<std::vector<float>> f32;
  std::vector<std::vector<uint16_t>> bf16;
  std::vector<std::vector<uint8_t>> fp8;  // F8E4M3 with 128 x 128 block scales
  std::vector<std::vector<float>> fp8_scales;
  std::vector<MoeExpert> list;
};

Experts make_experts(int E, int64_t H, int64_t I, DType dt, std::mt19937& rng) {
  Experts ex;
  const float sd = 0.2f;
  for (int e = 0; e < E; ++e) {
    for (int m = 0; m < 3; ++m) ex.f32.push_back(random_vec(size_t(H * I), rng, sd));
  }
  if (dt == DType::BF16) {
    for (const auto& v : ex.f32) ex.bf16.push_back(to_bf16(v));
  }
  if (dt == DType::F8E4M3) {             // as DeepSeek V3 publishes its experts
    const int64_t big = std::max(H, I);  // one scale (1/64) everywhere
    for (const auto& v : ex.f32) {
      ex.fp8.emplace_back(v.size());
      for (size_t i = 0; i < v.size(); ++i) ex.fp8.back()[i] = f32_to_f8e4m3(v[i] * 64.0f);
      ex.fp8_scales.emplace_back(size_t(fp8_scale_rows(big) * fp8_scale_cols(big)), 1.0f / 64.0f);
    }
  }
  for (int e = 0; e < E; ++e) {
    auto mat = [&](int m, int64_t rows, int64_t cols) {
      const int i = e * 3 + m;
      const void* data = dt == DType::BF16     ? (const void*)ex.bf16[i].data()
                         : dt == DType::F8E4M3 ? (const void*)ex.fp8[i].data()
                                               : ex.f32[i].data();
      Matrix w{data, dt, rows, cols};
      if (dt == DType::F8E4M3) w.block_scales = ex.fp8_scales[i].data();
      return w;
    };
    ex.list.push_back({mat(0, I, H), mat(1, I, H), mat(2, H, I)});
  }
  return ex;
}

// Routing of T tokens over E experts, k each, some assignments skipped.
Routed random_routing(int T, int E, int k, std::mt19937& rng) {
  Routed r;
  std::uniform_real_distribution<float> u(0.1f, 1.0f);
  for (int t = 0; t < T; ++t) {
    std::vector<int32_t> perm(E);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int j = 0; j < k; ++j) {
      r.ids.push_back(t % 5 == 2 && j == 0 ? -1 : perm[j]);
      r.weights.push_back(u(rng));
    }
  }
  return r;
}

TEST_P(MoeExperts, MatchesPerTokenReference) {
  std::mt19937 rng(3);
  const int E = 8, T = 23, k = 3;
  const int64_t H = 48, I = 40;  // not multiples of the vector width
  for (DType dt : {DType::F32, DType::BF16, DType::F8E4M3}) {
    SCOPED_TRACE(dtype_name(dt));
    const Experts ex = make_experts(E, H, I, dt, rng);
    const Routed r = random_routing(T, E, k, rng);
    const auto x = random_vec(size_t(T) * H, rng);
    std::vector<float> out(T * H, NAN), want(T * H, NAN);
    MoeScratch scratch;
    moe_experts_forward(x.data(), T, r.ids.data(), r.weights.data(), k, ex.list.data(), E, scratch,
                        out.data());
    ref::moe_experts_forward(x.data(), T, r.ids.data(), r.weights.data(), k, ex.list.data(), E,
                             want.data());
    // bf16 weights on the bf16 dot-product ISA also round activations.
    const float tol = dt == DType::BF16 && rounds_bf16_activations(GetParam()) ? 2e-2f : 1e-5f;
    expect_close(out, want, tol, "experts vs per-token reference");
  }
}

TEST_P(MoeExperts, ATokenAloneEqualsItsRowInTheBatch) {
  // The batch's grouping puts a token with different others in each
  // expert's GEMM; its output row must not change by a bit, alone, in a
  // reversed batch, or on 1 or 2 threads.
  std::mt19937 rng(5);
  const int E = 6, T = 17, k = 2;
  const int64_t H = 64, I = 32;
  for (DType dt : {DType::F32, DType::BF16, DType::F8E4M3}) {
    SCOPED_TRACE(dtype_name(dt));
    const Experts ex = make_experts(E, H, I, dt, rng);
    const Routed r = random_routing(T, E, k, rng);
    const auto x = random_vec(size_t(T) * H, rng);
    MoeScratch scratch;
    std::vector<float> out(T * H, NAN), out1(T * H, NAN);
    moe_experts_forward(x.data(), T, r.ids.data(), r.weights.data(), k, ex.list.data(), E, scratch,
                        out.data());
    {
      ScopedThreads one(1);
      moe_experts_forward(x.data(), T, r.ids.data(), r.weights.data(), k, ex.list.data(), E,
                          scratch, out1.data());
    }
    EXPECT_EQ(out, out1) << "1 thread vs default";
    // Reversed token order.
    std::vector<float> xr, wr, outr(T * H, NAN);
    std::vector<int32_t> idr;
    for (int t = T - 1; t >= 0; --t) {
      xr.insert(xr.end(), x.begin() + t * H, x.begin() + (t + 1) * H);
      idr.insert(idr.end(), r.ids.begin() + t * k, r.ids.begin() + (t + 1) * k);
      wr.insert(wr.end(), r.weights.begin() + t * k, r.weights.begin() + (t + 1) * k);
    }
    moe_experts_forward(xr.data(), T, idr.data(), wr.data(), k, ex.list.data(), E, scratch,
                        outr.data());
    int mismatches = 0;
    for (int t = 0; t < T; ++t) {
      std::vector<float> alone(H, NAN);
      moe_experts_forward(x.data() + t * H, 1, r.ids.data() + t * k, r.weights.data() + t * k, k,
                          ex.list.data(), E, scratch, alone.data());
      mismatches += !std::equal(alone.begin(), alone.end(), out.begin() + t * H);
      mismatches += !std::equal(outr.begin() + (T - 1 - t) * H, outr.begin() + (T - t) * H,
                                out.begin() + t * H);
    }
    EXPECT_EQ(mismatches, 0);
  }
}

TEST_P(MoeExperts, ReadsOnlyTheExpertsThatHaveTokens) {
  // Experts nobody chose have no weights at all (null data): the forward
  // must neither read nor check them, and a token with every assignment
  // skipped gets zeros.
  std::mt19937 rng(6);
  const int E = 5, k = 2;
  const int64_t H = 16, I = 8;
  Experts ex = make_experts(E, H, I, DType::F32, rng);
  for (int e : {0, 2, 3})
    ex.list[e].gate.data = ex.list[e].up.data = ex.list[e].down.data = nullptr;
  const std::vector<int32_t> ids = {1, 4, -1, -1, 4, -1};
  const std::vector<float> w = {0.5f, 0.5f, 1.0f, 1.0f, 2.0f, 0.0f};
  const auto x = random_vec(size_t(3) * H, rng);
  std::vector<float> out(3 * H, NAN), want(3 * H, NAN);
  MoeScratch scratch;
  moe_experts_forward(x.data(), 3, ids.data(), w.data(), k, ex.list.data(), E, scratch, out.data());
  ref::moe_experts_forward(x.data(), 3, ids.data(), w.data(), k, ex.list.data(), E, want.data());
  expect_close(out, want, 1e-5f, "sparse experts");
  for (int64_t i = 0; i < H; ++i) EXPECT_EQ(out[H + i], 0.0f);
  std::vector<int32_t> bad = {0, 1, -1, -1, -1, -1};  // expert 0 has no weights
  EXPECT_ANY_THROW(moe_experts_forward(x.data(), 3, bad.data(), w.data(), k, ex.list.data(), E,
                                       scratch, out.data()));
}

TEST(MoeExpertsWith, RunsEachUsedExpertOnceInOrderOnItsTokens) {
  // A caller-supplied expert y = (e + 1) * x + e: called once per used
  // expert, ascending, with exactly that expert's token rows gathered;
  // outputs are the weighted sums of those.
  const int64_t H = 5;
  const int T = 4, k = 2, E = 6;
  const std::vector<int32_t> ids = {3, 1, 1, -1, 5, 3, 1, 3};
  const std::vector<float> w = {0.5f, 0.25f, 2.0f, 9.0f, 1.0f, 0.5f, 0.125f, 4.0f};
  std::mt19937 rng(8);
  const auto x = random_vec(size_t(T) * H, rng);
  std::vector<int> calls;
  std::vector<int64_t> rows;
  auto expert = [&](int e, const float* xe, int64_t n, float* ye) {
    calls.push_back(e);
    rows.push_back(n);
    for (int64_t i = 0; i < n * H; ++i) ye[i] = static_cast<float>(e + 1) * xe[i] + e;
  };
  MoeScratch scratch;
  std::vector<float> out(T * H, NAN);
  moe_experts_forward_with(x.data(), T, H, ids.data(), w.data(), k, E, expert, scratch, out.data());
  EXPECT_EQ(calls, (std::vector<int>{1, 3, 5}));
  EXPECT_EQ(rows, (std::vector<int64_t>{3, 3, 1}));  // tokens {0, 1, 3}, {0, 2, 3}, {2}
  EXPECT_EQ(scratch.groups.used, (std::vector<int32_t>{1, 3, 5}));
  for (int t = 0; t < T; ++t) {
    for (int64_t i = 0; i < H; ++i) {
      double want = 0;
      for (int j = 0; j < k; ++j) {
        const int e = ids[t * k + j];
        if (e >= 0) want += w[t * k + j] * ((e + 1.0) * x[t * H + i] + e);
      }
      EXPECT_NEAR(out[t * H + i], want, 1e-5) << t << ", " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllSupported, MoeExperts, ::testing::ValuesIn(supported_isas()),
                         isa_test_name);

}  // namespace
}  // namespace pagoda::ops::testing
