// linear on FP8 (e4m3 + 128 x 128 block scales) weights, every supported
// ISA: against the f64 reference (ref::matrix_at's dequantisation), bit for
// bit against the f32 linear of the dequantised matrix (the property that
// makes outputs independent of batch composition and lets an FP8 shard and
// its f32 copy agree), and across batch sizes and thread counts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/error.h"
#include "ops/ops.h"
#include "ops/reference.h"
#include "ops_test_util.h"

namespace pagoda::ops::testing {
namespace {

// A random FP8 matrix: every finite e4m3 code (subnormals included) and
// block scales spread over a few binades, as DeepSeek's are.
struct Fp8Weights {
  std::vector<uint8_t> bytes;
  std::vector<float> scales;
  Matrix m;

  Fp8Weights(int64_t rows, int64_t cols, std::mt19937& rng)
      : bytes(rows * cols), scales(fp8_scale_rows(rows) * fp8_scale_cols(cols)) {
    std::uniform_int_distribution<int> code(0, 255);
    for (uint8_t& b : bytes) {
      do b = static_cast<uint8_t>(code(rng));
      while ((b & 0x7f) == 0x7f);  // NaN codes are not weights
    }
    std::uniform_real_distribution<float> mant(1.0f, 2.0f);
    std::uniform_int_distribution<int> exp(-14, -6);
    for (float& s : scales) s = std::ldexp(mant(rng), exp(rng));
    m = Matrix{bytes.data(), DType::F8E4M3, rows, cols};
    m.block_scales = scales.data();
  }

  // The dequantised matrix as the reference defines it.
  std::vector<float> dequantised() const {
    std::vector<float> out(m.rows * m.cols);
    for (int64_t r = 0; r < m.rows; ++r)
      for (int64_t c = 0; c < m.cols; ++c) out[r * m.cols + c] = ref::matrix_at(m, r, c);
    return out;
  }
};

struct Shape {
  int64_t n, k;
};
// Whole and partial 128-blocks in both directions, tails of every lane count.
const Shape kShapes[] = {{1, 1}, {17, 33}, {130, 260}, {257, 96}, {64, 384}, {300, 129}};

class LinearFp8 : public IsaTest {};

TEST_P(LinearFp8, MatchesReference) {
  std::mt19937 rng(11);
  for (const Shape& s : kShapes) {
    const Fp8Weights w(s.n, s.k, rng);
    const auto bias = random_vec(s.n, rng);
    for (int64_t m : {1, 2, 3, 4, 5, 17}) {
      const auto x = random_vec(m * s.k, rng);
      std::vector<float> y(m * s.n), want(m * s.n);
      linear(x.data(), m, w.m, bias.data(), y.data());
      ref::linear(x.data(), m, w.m, bias.data(), want.data());
      // f32 accumulation error of sums of ~k terms of size |x w|.
      float scale = 0;
      for (float v : w.dequantised()) scale = std::max(scale, std::fabs(v));
      const float tol = 1e-5f * std::sqrt(static_cast<float>(s.k)) * scale * 4;
      for (size_t i = 0; i < y.size(); ++i) {
        ASSERT_NEAR(y[i], want[i], tol + 1e-6f) << "n " << s.n << " k " << s.k << " m " << m;
      }
    }
  }
}

TEST_P(LinearFp8, EqualsF32LinearOfTheDequantisedMatrixBitForBit) {
  std::mt19937 rng(12);
  for (const Shape& s : kShapes) {
    const Fp8Weights w(s.n, s.k, rng);
    const auto wf = w.dequantised();
    const Matrix f32{wf.data(), DType::F32, s.n, s.k};
    const auto bias = random_vec(s.n, rng);
    for (int64_t m : {1, 3, 4, 9, 33}) {
      const auto x = random_vec(m * s.k, rng);
      std::vector<float> y(m * s.n), want(m * s.n);
      linear(x.data(), m, w.m, bias.data(), y.data());
      linear(x.data(), m, f32, bias.data(), want.data());
      for (size_t i = 0; i < y.size(); ++i)
        ASSERT_EQ(y[i], want[i]) << "n " << s.n << " k " << s.k << " m " << m << " at " << i;
    }
  }
}

TEST_P(LinearFp8, RowsDoNotDependOnBatchOrThreads) {
  // The decode path (few rows, in-register conversion) and the prefill path
  // (scratch dequantisation + GEMM tiles) must agree on every row.
  std::mt19937 rng(13);
  const int64_t n = 300, k = 520, m = 37;
  const Fp8Weights w(n, k, rng);
  const auto x = random_vec(m * k, rng);
  std::vector<float> batch(m * n);
  {
    ScopedThreads threads(3);
    linear(x.data(), m, w.m, nullptr, batch.data());
  }
  for (int threads : {1, 2}) {
    ScopedThreads scoped(threads);
    for (int64_t r : {0, 5, 36}) {
      std::vector<float> one(n);
      linear(x.data() + r * k, 1, w.m, nullptr, one.data());
      for (int64_t j = 0; j < n; ++j) ASSERT_EQ(one[j], batch[r * n + j]) << r << "," << j;
    }
  }
}

TEST_P(LinearFp8, LinearMultiMixesFp8AndOtherWeights) {
  std::mt19937 rng(14);
  const int64_t m = 6, k = 200;
  const Fp8Weights a(150, k, rng);
  // (F32: a BF16 output beside a non-BF16 one takes the widening kernel on
  // avx512bf16, unlike linear() alone; that holds before FP8 too.)
  const auto bf = random_vec(40 * k, rng);
  const Matrix b{bf.data(), DType::F32, 40, k};
  const auto x = random_vec(m * k, rng);
  std::vector<float> ya(m * 150), yb(m * 40), want_a(m * 150), want_b(m * 40);
  const LinearOutput outs[] = {{&a.m, nullptr, ya.data()}, {&b, nullptr, yb.data()}};
  linear_multi(x.data(), m, outs, 2);
  linear(x.data(), m, a.m, nullptr, want_a.data());
  linear(x.data(), m, b, nullptr, want_b.data());
  EXPECT_EQ(ya, want_a);
  EXPECT_EQ(yb, want_b);
}

TEST_P(LinearFp8, RefusesMissingScales) {
  std::mt19937 rng(15);
  Fp8Weights w(16, 16, rng);
  w.m.block_scales = nullptr;
  std::vector<float> x(16), y(16);
  EXPECT_THROW(linear(x.data(), 1, w.m, nullptr, y.data()), InternalError);
}

INSTANTIATE_TEST_SUITE_P(AllSupported, LinearFp8, ::testing::ValuesIn(supported_isas()),
                         isa_test_name);

}  // namespace
}  // namespace pagoda::ops::testing
