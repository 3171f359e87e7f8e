// linear with bf16 weights on every supported ISA, with the properties the
// bf16 dot-product path (vdpbf16ps) must keep: activations rounded to
// nearest even, odd shapes (k tails of a 32-pair step, column tails), and
// rows bit-identical whatever the batch size or thread count.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "linear_cases.h"
#include "ops/ops.h"
#include "ops_test_util.h"

namespace pagoda::ops::testing {
namespace {

class LinearBf16Dot : public IsaTest {};

float from_bits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

TEST_P(LinearBf16Dot, MatchesReferenceOnOddShapes) {
  // k tails of the 32-pair step, column tails, and row tiles plus remainders.
  std::mt19937 rng(11);
  const LinearCases cases{{1, 31, 33, 1000}, {1, 3, 64}, {1, 5, 17}, {DType::BF16}};
  EXPECT_EQ(expect_linear_matches_reference(GetParam(), cases, rng), size_t{4 * 3 * 3 * 2});
}

TEST_P(LinearBf16Dot, IdentityWeightsReturnTheRoundedActivations) {
  // With identity weights every output is one activation times 1 plus exact
  // zeros, so linear returns the activations exactly as the kernel sees
  // them: unchanged when bf16 weights are widened, rounded to nearest even
  // (ties to even) on the dot-product ISA. k = 40 covers a 32-pair step and
  // a masked tail.
  const int64_t k = 40;
  std::vector<float> x = {
      from_bits(0x3f808000),  // 1.00390625: tie, rounds down to even 0x3f80
      from_bits(0x3f818000),  // tie, rounds up to even 0x3f82
      from_bits(0x3f808001),  // just above the tie: up to 0x3f81
      from_bits(0x3f807fff),  // just below the tie: down to 0x3f80
      from_bits(0xbf818000),  // negative tie: magnitude to even 0xbf82
      from_bits(0x477f8000),  // tie at a binade edge: carries into the exponent
      1.0f,
      -3.140625f,  // exactly representable
  };
  std::mt19937 rng(12);
  while (static_cast<int64_t>(x.size()) < k) x.push_back(random_vec(1, rng, 100.0f)[0]);
  std::vector<uint16_t> eye(k * k, 0);
  for (int64_t i = 0; i < k; ++i) eye[i * k + i] = f32_to_bf16(1.0f);
  std::vector<float> y(k, NAN);
  linear(x.data(), 1, Matrix{eye.data(), DType::BF16, k, k}, nullptr, y.data());
  if (!rounds_bf16_activations(GetParam())) {
    EXPECT_EQ(y, x);
    return;
  }
  const uint32_t expected_hi[] = {0x3f80, 0x3f82, 0x3f81, 0x3f80, 0xbf82, 0x4780, 0x3f80, 0xc049};
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(y[i], from_bits(expected_hi[i] << 16)) << "element " << i;
  }
  // The rest: the same rounding as the checkpoint converter's f32 -> bf16.
  EXPECT_EQ(y, bf16_rounded(x));
}

TEST_P(LinearBf16Dot, RowsEqualDecodeRowsBitForBit) {
  // Greedy outputs must not depend on batch composition: every row of a
  // prefill-sized call (row tiles and remainder rows, column tiles and
  // tails, k tails) equals the same row computed alone (decode, m = 1), on
  // one thread and on two.
  std::mt19937 rng(13);
  for (int64_t k : {31, 33, 1000}) {
    for (int64_t n : {5, 17, 389}) {
      const int64_t max_m = 70;
      const auto x = random_vec(max_m * k, rng);
      const auto wb = to_bf16(random_vec(n * k, rng));
      const auto bias = random_vec(n, rng);
      const Matrix w{wb.data(), DType::BF16, n, k};
      std::vector<float> alone(max_m * n);
      for (int64_t r = 0; r < max_m; ++r)
        linear(x.data() + r * k, 1, w, bias.data(), &alone[r * n]);
      for (int threads : {1, 2}) {
        ScopedThreads scoped(threads);
        for (int64_t m : {3, 64, 70}) {
          std::vector<float> batched(m * n, NAN);
          linear(x.data(), m, w, bias.data(), batched.data());
          EXPECT_TRUE(std::equal(batched.begin(), batched.end(), alone.begin()))
              << "k=" << k << " n=" << n << " m=" << m << " threads=" << threads;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllSupported, LinearBf16Dot, ::testing::ValuesIn(supported_isas()),
                         isa_test_name);

}  // namespace
}  // namespace pagoda::ops::testing
