// mHC hyper-connections (models/mhc.h) against spec §3.2.1 and its
// invariants (§6.3 item 10): after 20 Sinkhorn rounds the mixing matrix is
// doubly stochastic within 1e-3; pre in (eps, 1 + eps), post in (0, 2);
// with fn = 0 the coefficients depend on base and scale only (checked
// against values computed here from the formulas); post = 0 with C = I
// leaves the streams unchanged.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "checkpoint_test_util.h"
#include "models/checkpoint.h"
#include "models/mhc.h"
#include "models/weights.h"

namespace pagoda {
namespace {

constexpr int64_t kHc = 4, kDim = 32, kMix = (2 + kHc) * kHc;
constexpr double kEps = 1e-6;

struct Fixture {
  test::TempDir tmp;
  std::unique_ptr<Checkpoint> ckpt;
  std::unique_ptr<WeightStore> weights;
  std::vector<float> fn, base, scale;

  explicit Fixture(bool zero_fn) {
    std::mt19937 rng(5);
    std::normal_distribution<float> n01(0.0f, 1.0f);
    fn.resize(kMix * kHc * kDim);
    // Mixing logits of the spread real checkpoints have (a far peakier
    // softmax needs more than 20 Sinkhorn rounds to be within 1e-3).
    for (float& v : fn) v = zero_fn ? 0.0f : 0.05f * n01(rng);
    base.resize(kMix);
    for (float& v : base) v = n01(rng);
    scale = {0.7f, 1.3f, 0.5f};
    test::SafetensorsWriter w;
    w.add("hc_attn_fn", "F32", {kMix, kHc * kDim}, fn.data(), fn.size() * 4);
    w.add("hc_attn_base", "F32", {kMix}, base.data(), base.size() * 4);
    w.add("hc_attn_scale", "F32", {3}, scale.data(), scale.size() * 4);
    w.write(tmp / "model.safetensors");
    ckpt = Checkpoint::open(tmp.str());
    weights = std::make_unique<WeightStore>(*ckpt);
  }
  HyperConnection connection() {
    return HyperConnection(*weights, "hc_attn", {kHc, kDim, 20, kEps, 1e-6});
  }
};

// Streams whose stream k is the unit vector e_k: y[k] = pre_k.
std::vector<float> unit_streams(int64_t tokens) {
  std::vector<float> X(tokens * kHc * kDim, 0.0f);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t k = 0; k < kHc; ++k) X[(t * kHc + k) * kDim + k] = 1.0f + static_cast<float>(t);
  }
  return X;
}

TEST(Mhc, SinkhornMakesTheMixDoublyStochasticAndBoundsPreAndPost) {
  Fixture f(/*zero_fn=*/false);
  HyperConnection hc = f.connection();
  std::mt19937 rng(7);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  const int64_t tokens = 6;
  std::vector<float> X(tokens * kHc * kDim);
  for (float& v : X) v = n01(rng);
  std::vector<float> y(tokens * kDim), post, C;
  hc.collapse(X.data(), tokens, y.data(), &post, &C);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t a = 0; a < kHc; ++a) {
      double row = 0, col = 0;
      for (int64_t b = 0; b < kHc; ++b) {
        row += C[(t * kHc + a) * kHc + b];
        col += C[(t * kHc + b) * kHc + a];
      }
      EXPECT_NEAR(row, 1.0, 1e-3) << "token " << t << " row " << a;
      EXPECT_NEAR(col, 1.0, 1e-3) << "token " << t << " column " << a;
    }
    for (int64_t k = 0; k < kHc; ++k) {
      EXPECT_GT(post[t * kHc + k], 0.0f);
      EXPECT_LT(post[t * kHc + k], 2.0f);
    }
  }
  // pre through y with unit streams.
  const std::vector<float> U = unit_streams(tokens);
  hc.collapse(U.data(), tokens, y.data(), &post, &C);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t k = 0; k < kHc; ++k) {
      const double pre = y[t * kDim + k] / (1.0 + static_cast<double>(t));
      EXPECT_GT(pre, kEps);
      EXPECT_LT(pre, 1.0 + kEps);
    }
  }
}

TEST(Mhc, WithZeroFnTheCoefficientsComeFromBaseAndScaleAlone) {
  Fixture f(/*zero_fn=*/true);
  HyperConnection hc = f.connection();
  auto sigmoid = [](double x) { return 1.0 / (1.0 + std::exp(-x)); };
  // The spec's formulas with m = 0.
  double C[kHc][kHc];
  for (int64_t a = 0; a < kHc; ++a) {
    double mx = -1e300, sum = 0;
    for (int64_t b = 0; b < kHc; ++b) mx = std::max(mx, double{f.base[2 * kHc + a * kHc + b]});
    for (int64_t b = 0; b < kHc; ++b) sum += std::exp(f.base[2 * kHc + a * kHc + b] - mx);
    for (int64_t b = 0; b < kHc; ++b) {
      C[a][b] = std::exp(f.base[2 * kHc + a * kHc + b] - mx) / sum + kEps;
    }
  }
  auto columns = [&] {
    for (int64_t b = 0; b < kHc; ++b) {
      double s = 0;
      for (int64_t a = 0; a < kHc; ++a) s += C[a][b];
      for (int64_t a = 0; a < kHc; ++a) C[a][b] /= s + kEps;
    }
  };
  columns();
  for (int it = 1; it < 20; ++it) {
    for (int64_t a = 0; a < kHc; ++a) {
      double s = 0;
      for (int64_t b = 0; b < kHc; ++b) s += C[a][b];
      for (int64_t b = 0; b < kHc; ++b) C[a][b] /= s + kEps;
    }
    columns();
  }
  std::mt19937 rng(9);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  const int64_t tokens = 3;
  std::vector<float> X(tokens * kHc * kDim);
  for (float& v : X) v = n01(rng);
  std::vector<float> y(tokens * kDim), post, Cg;
  hc.collapse(X.data(), tokens, y.data(), &post, &Cg);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t k = 0; k < kHc; ++k) {
      EXPECT_NEAR(post[t * kHc + k], 2.0 * sigmoid(f.base[kHc + k]), 1e-6);
    }
    for (int64_t a = 0; a < kHc; ++a) {
      for (int64_t b = 0; b < kHc; ++b) {
        EXPECT_NEAR(Cg[(t * kHc + a) * kHc + b], C[a][b], 1e-6) << a << "," << b;
      }
    }
    for (int64_t d = 0; d < kDim; ++d) {
      double want = 0;
      for (int64_t k = 0; k < kHc; ++k) {
        want += (sigmoid(f.base[k]) + kEps) * X[(t * kHc + k) * kDim + d];
      }
      EXPECT_NEAR(y[t * kDim + d], want, 1e-5);
    }
  }
}

TEST(Mhc, ZeroPostAndIdentityMixLeaveTheStreams) {
  Fixture f(/*zero_fn=*/false);
  HyperConnection hc = f.connection();
  const int64_t tokens = 2;
  std::vector<float> X(tokens * kHc * kDim), o(tokens * kDim, 5.0f), out(X.size());
  for (size_t i = 0; i < X.size(); ++i) X[i] = static_cast<float>(i % 17) - 8.0f;
  std::vector<float> post(tokens * kHc, 0.0f), C(tokens * kHc * kHc, 0.0f);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t k = 0; k < kHc; ++k) C[(t * kHc + k) * kHc + k] = 1.0f;
  }
  hc.expand(o.data(), X.data(), tokens, post, C, out.data());
  EXPECT_EQ(out, X);
}

}  // namespace
}  // namespace pagoda
