// rms_norm, add_rms_norm, silu_mul and softmax on every supported ISA
// against the reference, with row lengths that exercise vector tails.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "ops/ops.h"
#include "ops/reference.h"
#include "ops_test_util.h"

namespace pagoda::ops::testing {
namespace {

class NormActivation : public IsaTest {};

const int64_t kLengths[] = {1, 3, 8, 17, 67, 1000, 1024};

TEST_P(NormActivation, RmsNormMatchesReference) {
  std::mt19937 rng(10);
  for (int64_t n : kLengths) {
    for (int64_t m : {1, 5, 33}) {
      const auto x = random_vec(m * n, rng, 3.0f), w = random_vec(n, rng);
      std::vector<float> y(m * n, NAN), y_ref(m * n);
      rms_norm(x.data(), w.data(), m, n, 1e-5f, y.data());
      ref::rms_norm(x.data(), w.data(), m, n, 1e-5f, y_ref.data());
      expect_close(y, y_ref, 1e-5f, "rms_norm n=" + std::to_string(n) + " m=" + std::to_string(m));
      // In place (y aliases x), as the model does for q/k norms.
      auto inplace = x;
      rms_norm(inplace.data(), w.data(), m, n, 1e-5f, inplace.data());
      EXPECT_EQ(inplace, y) << "in place, n=" << n;
    }
  }
}

TEST_P(NormActivation, AddRmsNormMatchesReference) {
  std::mt19937 rng(11);
  for (int64_t n : kLengths) {
    const int64_t m = 6;
    const auto x = random_vec(m * n, rng), w = random_vec(n, rng), r0 = random_vec(m * n, rng);
    auto res = r0, res_ref = r0;
    std::vector<float> y(m * n, NAN), y_ref(m * n);
    add_rms_norm(res.data(), x.data(), w.data(), m, n, 1e-6f, y.data());
    ref::add_rms_norm(res_ref.data(), x.data(), w.data(), m, n, 1e-6f, y_ref.data());
    EXPECT_EQ(res, res_ref) << "residual += x is one exact f32 add, n=" << n;
    expect_close(y, y_ref, 1e-5f, "add_rms_norm n=" + std::to_string(n));
  }
}

TEST_P(NormActivation, SiluMulMatchesReference) {
  std::mt19937 rng(12);
  for (int64_t inter : kLengths) {
    const int64_t m = 4;
    const auto gu = random_vec(m * 2 * inter, rng, 4.0f);
    std::vector<float> out(m * inter, NAN), out_ref(m * inter);
    silu_mul(gu.data(), m, inter, out.data());
    ref::silu_mul(gu.data(), m, inter, out_ref.data());
    expect_close(out, out_ref, 1e-5f, "silu_mul inter=" + std::to_string(inter));
  }
}

TEST_P(NormActivation, SoftmaxMatchesReference) {
  std::mt19937 rng(13);
  for (int64_t n : kLengths) {
    // Large logits: the max must be subtracted for exp not to overflow.
    auto x = random_vec(n, rng, 30.0f);
    x[0] = 200.0f;
    auto x_ref = x;
    softmax(x.data(), n);
    ref::softmax(x_ref.data(), n);
    expect_close(x, x_ref, 1e-6f, "softmax n=" + std::to_string(n));
    EXPECT_NEAR(std::accumulate(x.begin(), x.end(), 0.0), 1.0, 1e-5);
  }
}

INSTANTIATE_TEST_SUITE_P(AllSupported, NormActivation, ::testing::ValuesIn(supported_isas()),
                         isa_test_name);

}  // namespace
}  // namespace pagoda::ops::testing
