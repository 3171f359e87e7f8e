// DeepSeek V4's MoE pieces (spec §3.2.6) in ops/moe.h and ops.h: the
// sqrt(softplus) router (selection by sigma + bias without groups, weights
// from sigma alone), hash routing (experts = tid2eid[token], weights from
// sigma of those), the SwiGLU clamp (silu_mul's swiglu_limit) and routed
// experts with it, FP4 experts included. Scores and weights are recomputed
// here in f64 from the definitions; the fast ops also match their scalar
// twins (ops/reference.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "core/error.h"
#include "ops/moe.h"
#include "ops/reference.h"
#include "ops_test_util.h"

namespace pagoda::ops::testing {
namespace {

constexpr float kRouteScale = 1.5f;

MoeRouting v4_routing(int E, int k, const float* bias) {
  MoeRouting r;
  r.num_experts = E;
  r.top_k = k;
  r.scoring = MoeScoring::SqrtSoftplus;
  r.correction_bias = bias;
  r.norm_topk_prob = true;
  r.routed_scaling_factor = kRouteScale;
  return r;
}

// sigma = sqrt(softplus(z)) in f64, from the definition (no threshold).
double sigma(float z) { return std::sqrt(std::log1p(std::exp(double{z}))); }

// The expected weights of experts `ids` for logits z: sigma normalised over
// them, times the route scale.
std::vector<double> expected_weights(const float* z, const int32_t* ids, int k) {
  double sum = 0;
  for (int j = 0; j < k; ++j) sum += sigma(z[ids[j]]);
  std::vector<double> w(k);
  for (int j = 0; j < k; ++j) w[j] = sigma(z[ids[j]]) / sum * kRouteScale;
  return w;
}

TEST(MoeRouteV4, SqrtSoftplusSelectsBySigmaPlusBiasAndWeighsBySigma) {
  std::mt19937 rng(31);
  const int E = 16, k = 6, T = 40;
  auto logits = random_vec(size_t(T) * E, rng, 2.0f);
  logits[3] = 30.0f;  // beyond softplus' threshold: sigma = sqrt(z)
  logits[E + 5] = -30.0f;
  std::vector<float> bias(E);
  std::uniform_real_distribution<float> u(0.0f, 0.6f);
  for (float& b : bias) b = u(rng);
  const MoeRouting r = v4_routing(E, k, bias.data());
  std::vector<int32_t> ids(T * k), ref_ids(T * k);
  std::vector<float> w(T * k), ref_w(T * k);
  moe_route(logits.data(), T, r, ids.data(), w.data());
  ref::moe_route(logits.data(), T, r, ref_ids.data(), ref_w.data());
  EXPECT_EQ(ids, ref_ids);
  EXPECT_EQ(w, ref_w);
  for (int t = 0; t < T; ++t) {
    const float* z = logits.data() + t * E;
    // Selection from the definition: the k largest sigma + bias, descending.
    std::vector<int32_t> order(E);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      return sigma(z[a]) + bias[a] > sigma(z[b]) + bias[b];
    });
    for (int j = 0; j < k; ++j) ASSERT_EQ(ids[t * k + j], order[j]) << "token " << t;
    const auto want = expected_weights(z, ids.data() + t * k, k);
    double sum = 0;
    for (int j = 0; j < k; ++j) {
      EXPECT_NEAR(w[t * k + j], want[j], 2e-6) << t << "," << j;
      sum += w[t * k + j];
    }
    EXPECT_NEAR(sum, kRouteScale, 2e-6) << "weights sum to route_scale, token " << t;
  }
  // Token 0's expert 3 (z = 30, past the threshold) is chosen, its sigma
  // sqrt(30) exactly as the definition's to f32 precision.
  const auto at = std::find(ids.begin(), ids.begin() + k, 3);
  ASSERT_NE(at, ids.begin() + k);
  double sum = 0;
  for (int j = 0; j < k; ++j) sum += sigma(logits[ids[j]]);
  EXPECT_NEAR(w[at - ids.begin()], std::sqrt(30.0) / sum * kRouteScale, 2e-6);
}

TEST(MoeRouteV4, BiasChangesTheSelectionNeverTheWeights) {
  // Expert 7 has the lowest sigma; its bias lifts it into the top 2, and
  // its weight is still its own sigma over the pair's.
  const std::vector<float> z = {2.0f, 1.0f, 0.5f, 0.0f, -0.5f, -1.0f, -1.5f, -2.0f};
  std::vector<float> bias(8, 0.0f);
  std::vector<int32_t> ids(2);
  std::vector<float> w(2);
  moe_route(z.data(), 1, v4_routing(8, 2, bias.data()), ids.data(), w.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 1}));
  bias[7] = 2.0f;  // sigma(-2) + 2 = 2.13 > sigma(2) = 1.46
  moe_route(z.data(), 1, v4_routing(8, 2, bias.data()), ids.data(), w.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{7, 0}));
  const auto want = expected_weights(z.data(), ids.data(), 2);
  EXPECT_NEAR(w[0], want[0], 1e-6);
  EXPECT_NEAR(w[1], want[1], 1e-6);
  // Same selection with and without a bias that keeps the order: same bits.
  std::vector<float> flat(8, 0.25f);
  std::vector<int32_t> ids2(2);
  std::vector<float> w2(2);
  moe_route(z.data(), 1, v4_routing(8, 2, nullptr), ids.data(), w.data());
  moe_route(z.data(), 1, v4_routing(8, 2, flat.data()), ids2.data(), w2.data());
  EXPECT_EQ(ids, ids2);
  EXPECT_EQ(w, w2);
}

struct HashCase {
  int E = 12, k = 4, vocab = 50, T = 30;
  std::vector<int32_t> table, tokens;
  std::vector<float> logits;
  explicit HashCase(std::mt19937& rng) {
    for (int v = 0; v < vocab; ++v) {  // k distinct experts per token id
      std::vector<int32_t> perm(E);
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      table.insert(table.end(), perm.begin(), perm.begin() + k);
    }
    std::uniform_int_distribution<int> tok(0, vocab - 1);
    for (int t = 0; t < T; ++t) tokens.push_back(tok(rng));
    tokens[1] = tokens[0];  // a repeated token: the same experts
    logits = random_vec(size_t(T) * E, rng, 2.0f);
  }
};

TEST(MoeRouteHashed, PicksExactlyTid2eidWithSigmaWeights) {
  std::mt19937 rng(32);
  const HashCase h(rng);
  std::vector<float> bias(h.E, 5.0f);
  bias[0] = -5.0f;  // would change any selection; hash layers ignore it
  for (const float* b : {static_cast<const float*>(nullptr), static_cast<const float*>(bias.data())}) {
    const MoeRouting r = v4_routing(h.E, h.k, b);
    std::vector<int32_t> ids(h.T * h.k), ref_ids(h.T * h.k);
    std::vector<float> w(h.T * h.k), ref_w(h.T * h.k);
    moe_route_hashed(h.logits.data(), h.tokens.data(), h.T, h.table.data(), h.vocab, r,
                     ids.data(), w.data());
    ref::moe_route_hashed(h.logits.data(), h.tokens.data(), h.T, h.table.data(), h.vocab, r,
                          ref_ids.data(), ref_w.data());
    EXPECT_EQ(ids, ref_ids);
    EXPECT_EQ(w, ref_w);
    for (int t = 0; t < h.T; ++t) {
      double sum = 0;
      const auto want = expected_weights(h.logits.data() + t * h.E, ids.data() + t * h.k, h.k);
      for (int j = 0; j < h.k; ++j) {
        ASSERT_EQ(ids[t * h.k + j], h.table[h.tokens[t] * h.k + j]) << t << "," << j;
        EXPECT_NEAR(w[t * h.k + j], want[j], 2e-6) << t << "," << j;
        sum += w[t * h.k + j];
      }
      EXPECT_NEAR(sum, kRouteScale, 2e-6) << "token " << t;
    }
  }
}

TEST(MoeRouteHashed, RefusesBadTokensAndTables) {
  std::mt19937 rng(33);
  HashCase h(rng);
  const MoeRouting r = v4_routing(h.E, h.k, nullptr);
  std::vector<int32_t> ids(h.T * h.k);
  std::vector<float> w(h.T * h.k);
  auto run = [&] {
    moe_route_hashed(h.logits.data(), h.tokens.data(), h.T, h.table.data(), h.vocab, r,
                     ids.data(), w.data());
  };
  EXPECT_NO_THROW(run());
  h.tokens[3] = h.vocab;  // out of the table
  EXPECT_THROW(run(), InternalError);
  h.tokens[3] = 0;
  h.table[1] = h.E;  // no such expert
  EXPECT_THROW(run(), InternalError);
  h.table[1] = h.table[0];  // an expert twice in a row
  EXPECT_THROW(run(), InternalError);
}

class SwigluClamp : public IsaTest {};

TEST_P(SwigluClamp, ClampsGateAboveAndUpBothWays) {
  std::mt19937 rng(34);
  const int64_t m = 7, inter = 45;  // a tail on every ISA
  const float L = 1.0f;
  auto gate_up = random_vec(size_t(m * 2 * inter), rng, 3.0f);  // many values past L
  std::vector<float> out(m * inter), want(m * inter), plain(m * inter);
  silu_mul(gate_up.data(), m, inter, out.data(), L);
  ref::silu_mul(gate_up.data(), m, inter, want.data(), L);
  expect_close(out, want, 1e-6f, "clamped silu_mul vs reference");
  // Against the definition, element by element, in f64.
  int clamped = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < inter; ++j) {
      const double g = gate_up[i * 2 * inter + j], u = gate_up[i * 2 * inter + inter + j];
      clamped += g > L || std::fabs(u) > L;
      const double gc = std::min(g, double{L}), uc = std::max(-double{L}, std::min(u, double{L}));
      EXPECT_NEAR(out[i * inter + j], gc / (1 + std::exp(-gc)) * uc, 1e-6) << i << "," << j;
    }
  }
  EXPECT_GT(clamped, m * inter / 2) << "the test must exercise the clamp";
  // Bit for bit silu_mul of the clamped inputs; limit 0 is no clamp.
  auto pre = gate_up;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < inter; ++j) {
      float& g = pre[i * 2 * inter + j];
      float& u = pre[i * 2 * inter + inter + j];
      g = std::min(g, L);
      u = std::clamp(u, -L, L);
    }
  }
  silu_mul(pre.data(), m, inter, plain.data());
  EXPECT_EQ(out, plain);
  silu_mul(gate_up.data(), m, inter, plain.data(), 0.0f);
  ref::silu_mul(gate_up.data(), m, inter, want.data());
  expect_close(plain, want, 1e-6f, "limit 0 = unclamped");
  EXPECT_NE(plain, out);
  EXPECT_THROW(silu_mul(gate_up.data(), m, inter, out.data(), -1.0f), InternalError);
}

// Random FP4 experts (hidden H, inter I): every code, scales around 2^-3.
struct Fp4Experts {
  std::vector<std::vector<uint8_t>> bytes, scales;
  std::vector<MoeExpert> list;
  Fp4Experts(int E, int64_t H, int64_t I, std::mt19937& rng) {
    std::uniform_int_distribution<int> byte(0, 255), sc(122, 125);
    auto mat = [&](int64_t rows, int64_t cols) {
      bytes.emplace_back(rows * cols / 2);
      scales.emplace_back(rows * cols / 32);
      for (uint8_t& b : bytes.back()) b = static_cast<uint8_t>(byte(rng));
      for (uint8_t& s : scales.back()) s = static_cast<uint8_t>(sc(rng));
      Matrix w{bytes.back().data(), DType::F4E2M1, rows, cols};
      w.e8m0_scales = scales.back().data();
      return w;
    };
    bytes.reserve(3 * E);
    scales.reserve(3 * E);
    for (int e = 0; e < E; ++e) {
      const Matrix gate = mat(I, H), up = mat(I, H), down = mat(H, I);
      list.push_back({gate, up, down});
    }
  }
};

TEST_P(SwigluClamp, RoutedFp4ExpertsWithTheClampMatchTheReference) {
  std::mt19937 rng(35);
  const int E = 6, T = 19, k = 2;
  const int64_t H = 64, I = 96;
  const Fp4Experts ex(E, H, I, rng);
  const auto x = random_vec(size_t(T) * H, rng);
  std::vector<int32_t> ids(T * k);
  std::vector<float> w(T * k);
  // Routing from the hash path: token t's experts fixed by this table.
  std::vector<int32_t> table(size_t(T) * k), tokens(T);
  for (int t = 0; t < T; ++t) {
    tokens[t] = t;
    table[t * k] = t % E;
    table[t * k + 1] = (t + 1 + t % 3) % E;
  }
  const auto logits = random_vec(size_t(T) * E, rng);
  moe_route_hashed(logits.data(), tokens.data(), T, table.data(), T, v4_routing(E, k, nullptr),
                   ids.data(), w.data());
  const float L = 2.0f;  // the expert activations here are O(5): the clamp bites
  std::vector<float> out(T * H), want(T * H), unclamped(T * H);
  MoeScratch scratch;
  moe_experts_forward(x.data(), T, ids.data(), w.data(), k, ex.list.data(), E, scratch,
                      out.data(), L);
  ref::moe_experts_forward(x.data(), T, ids.data(), w.data(), k, ex.list.data(), E, want.data(),
                           L);
  expect_close(out, want, 1e-5f, "clamped FP4 experts vs reference");
  moe_experts_forward(x.data(), T, ids.data(), w.data(), k, ex.list.data(), E, scratch,
                      unclamped.data());
  float diff = 0;
  for (size_t i = 0; i < out.size(); ++i) diff = std::max(diff, std::fabs(out[i] - unclamped[i]));
  EXPECT_GT(diff, 0.1f) << "the clamp must change these outputs";
  // A token alone gives its row of the batch, bit for bit.
  std::vector<float> one(H);
  moe_experts_forward(x.data() + 4 * H, 1, ids.data() + 4 * k, w.data() + 4 * k, k,
                      ex.list.data(), E, scratch, one.data(), L);
  for (int64_t i = 0; i < H; ++i) ASSERT_EQ(one[i], out[4 * H + i]) << i;
}

INSTANTIATE_TEST_SUITE_P(AllSupported, SwigluClamp, ::testing::ValuesIn(supported_isas()),
                         isa_test_name);

}  // namespace
}  // namespace pagoda::ops::testing
