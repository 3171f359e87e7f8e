// linear on FP4 (e2m1 codes, two per byte, E8M0 scale per 32 inputs)
// weights, every supported ISA: the layout decoded here from its definition
// (low nibble = even column, sign bit 3, magnitudes 0 .5 1 1.5 2 3 4 6,
// scale 2^(code - 127)) against ref::matrix_at and dequantize_fp4_row; the
// linear against the f64 reference, bit for bit against the F32 linear of
// the dequantised matrix (any m: decode and prefill paths), across batch
// sizes and thread counts, inside linear_multi; malformed matrices refused.
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

// The e2m1 value of a 4-bit code, from the format's definition (1 sign, 2
// exponent bits with bias 1, 1 mantissa bit; exponent 0 is subnormal).
double e2m1_value(int code) {
  const int e = (code >> 1) & 3, m = code & 1;
  const double mag = e == 0 ? m * 0.5 : (1 + m * 0.5) * std::ldexp(1.0, e - 1);
  return code & 8 ? -mag : mag;
}

// A random FP4 matrix: every code, scales over a few binades.
struct Fp4Weights {
  std::vector<uint8_t> bytes, scales;
  Matrix m;

  Fp4Weights(int64_t rows, int64_t cols, std::mt19937& rng, int scale_lo = 118,
             int scale_hi = 130)
      : bytes(rows * cols / 2), scales(rows * cols / 32) {
    std::uniform_int_distribution<int> byte(0, 255), sc(scale_lo, scale_hi);
    for (uint8_t& b : bytes) b = static_cast<uint8_t>(byte(rng));
    for (uint8_t& s : scales) s = static_cast<uint8_t>(sc(rng));
    m = Matrix{bytes.data(), DType::F4E2M1, rows, cols};
    m.e8m0_scales = scales.data();
  }

  // Element (r, c) decoded here, independently of ops and core.
  double value(int64_t r, int64_t c) const {
    const uint8_t b = bytes[r * (m.cols / 2) + c / 2];
    const int code = c % 2 == 0 ? b & 15 : b >> 4;
    return e2m1_value(code) * std::ldexp(1.0, scales[r * (m.cols / 32) + c / 32] - 127);
  }

  std::vector<float> dequantised() const {
    std::vector<float> out(m.rows * m.cols);
    for (int64_t r = 0; r < m.rows; ++r)
      for (int64_t c = 0; c < m.cols; ++c) out[r * m.cols + c] = static_cast<float>(value(r, c));
    return out;
  }
};

struct Shape {
  int64_t n, k;
};
// Odd row counts (tile remainders), one block to many, the V4 expert widths
// scaled down.
const Shape kShapes[] = {{1, 32}, {17, 64}, {130, 96}, {257, 288}, {40, 2048}};

TEST(Fp4Layout, DequantisationFollowsTheDefinition) {
  // Every code in both nibbles, scales from 2^-127 (products subnormal) up.
  const int64_t rows = 3, cols = 64;
  std::vector<uint8_t> bytes(rows * cols / 2), scales = {0, 1, 100, 127, 128, 140};
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 37 + 11);
  Matrix w{bytes.data(), DType::F4E2M1, rows, cols};
  w.e8m0_scales = scales.data();
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> row(cols);
    dequantize_fp4_row(w, r, 0, cols, row.data());
    for (int64_t c = 0; c < cols; ++c) {
      const uint8_t b = bytes[r * 32 + c / 2];
      const double want = e2m1_value(c % 2 == 0 ? b & 15 : b >> 4) *
                          std::ldexp(1.0, scales[r * 2 + c / 32] - 127);
      ASSERT_EQ(double{row[c]}, want) << r << "," << c;  // exact, subnormals included
      ASSERT_EQ(double{ref::matrix_at(w, r, c)}, want) << r << "," << c;
      ASSERT_EQ(std::signbit(row[c]), std::signbit(want)) << "code 8 is -0";
    }
  }
  // The 16 codes in order, from the definition: 0 .5 1 1.5 2 3 4 6 and negatives.
  const double grid[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  for (int c = 0; c < 16; ++c) ASSERT_EQ(std::fabs(e2m1_value(c)), grid[c & 7]);
  // A sub-range of columns.
  std::vector<float> part(10);
  dequantize_fp4_row(w, 1, 27, 37, part.data());
  for (int i = 0; i < 10; ++i) EXPECT_EQ(part[i], ref::matrix_at(w, 1, 27 + i));
}

class LinearFp4 : public IsaTest {};

TEST_P(LinearFp4, MatchesReference) {
  std::mt19937 rng(21);
  for (const Shape& s : kShapes) {
    const Fp4Weights w(s.n, s.k, rng);
    const auto wf = w.dequantised();
    const auto bias = random_vec(s.n, rng);
    for (int64_t m : {1, 2, 4, 5}) {
      const auto x = random_vec(m * s.k, rng);
      std::vector<float> y(m * s.n), want(m * s.n);
      linear(x.data(), m, w.m, bias.data(), y.data());
      // f64 sums of the values decoded here (not through matrix_at).
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t n = 0; n < s.n; ++n) {
          double sum = bias[n];
          for (int64_t k = 0; k < s.k; ++k) sum += double{x[i * s.k + k]} * w.value(n, k);
          want[i * s.n + n] = static_cast<float>(sum);
        }
      }
      float scale = 0;
      for (float v : wf) scale = std::max(scale, std::fabs(v));
      const float tol = 1e-5f * std::sqrt(static_cast<float>(s.k)) * scale * 4;
      for (size_t i = 0; i < y.size(); ++i)
        ASSERT_NEAR(y[i], want[i], tol + 1e-6f) << "n " << s.n << " k " << s.k << " m " << m;
    }
  }
}

TEST_P(LinearFp4, EqualsF32LinearOfTheDequantisedMatrixBitForBit) {
  std::mt19937 rng(22);
  for (const Shape& s : kShapes) {
    const Fp4Weights w(s.n, s.k, rng);
    const auto wf = w.dequantised();
    const Matrix f32{wf.data(), DType::F32, s.n, s.k};
    const auto bias = random_vec(s.n, rng);
    for (int64_t m : {1, 2, 3, 4, 9, 33}) {  // decode (m < 4) and prefill paths
      const auto x = random_vec(m * s.k, rng);
      std::vector<float> y(m * s.n), want(m * s.n);
      linear(x.data(), m, w.m, bias.data(), y.data());
      linear(x.data(), m, f32, bias.data(), want.data());
      for (size_t i = 0; i < y.size(); ++i)
        ASSERT_EQ(y[i], want[i]) << "n " << s.n << " k " << s.k << " m " << m << " at " << i;
    }
  }
}

TEST_P(LinearFp4, RowsDoNotDependOnBatchOrThreads) {
  std::mt19937 rng(23);
  const int64_t n = 300, k = 512, m = 37;
  const Fp4Weights w(n, k, rng);
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

TEST_P(LinearFp4, LinearMultiMixesFp4AndOtherWeights) {
  // gate and up side by side in one buffer (ldy), as the MoE experts run.
  std::mt19937 rng(24);
  const int64_t m = 6, k = 192, n = 70;
  const Fp4Weights a(n, k, rng), b(n, k, rng);
  const auto x = random_vec(m * k, rng);
  std::vector<float> both(m * 2 * n), want_a(m * n), want_b(m * n);
  const LinearOutput outs[] = {{&a.m, nullptr, both.data(), 2 * n},
                               {&b.m, nullptr, both.data() + n, 2 * n}};
  linear_multi(x.data(), m, outs, 2);
  linear(x.data(), m, a.m, nullptr, want_a.data());
  linear(x.data(), m, b.m, nullptr, want_b.data());
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      ASSERT_EQ(both[i * 2 * n + j], want_a[i * n + j]);
      ASSERT_EQ(both[i * 2 * n + n + j], want_b[i * n + j]);
    }
  }
}

TEST_P(LinearFp4, RefusesMissingScalesAndPartialBlocks) {
  std::mt19937 rng(25);
  Fp4Weights w(16, 64, rng);
  std::vector<float> x(64), y(16);
  Matrix no_scales = w.m;
  no_scales.e8m0_scales = nullptr;
  EXPECT_THROW(linear(x.data(), 1, no_scales, nullptr, y.data()), InternalError);
  Matrix partial = w.m;
  partial.cols = 48;  // not a whole number of 32-blocks
  EXPECT_THROW(linear(x.data(), 1, partial, nullptr, y.data()), InternalError);
  std::vector<float> row(64);
  EXPECT_THROW(dequantize_fp4_row(partial, 0, 0, 48, row.data()), InternalError);
}

INSTANTIATE_TEST_SUITE_P(AllSupported, LinearFp4, ::testing::ValuesIn(supported_isas()),
                         isa_test_name);

}  // namespace
}  // namespace pagoda::ops::testing
