// linear on every supported ISA against the scalar reference, plus the
// properties the engine relies on: exact bf16 widening, and outputs that do
// not depend on batch composition or thread count.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "linear_cases.h"
#include "ops/ops.h"
#include "ops/reference.h"
#include "ops_test_util.h"

namespace pagoda::ops::testing {
namespace {

class Linear : public IsaTest {};

TEST_P(Linear, MatchesReference) {
  std::mt19937 rng(1);
  const LinearCases cases{
      {1, 3, 17, 64, 257, 1000}, {1, 2, 5, 33}, {1, 7, 17, 130}, {DType::F32, DType::BF16}};
  EXPECT_EQ(expect_linear_matches_reference(GetParam(), cases, rng), size_t{6 * 4 * 4 * 2 * 2});
}

TEST_P(Linear, StridedOutputFillsOnlyItsColumns) {
  // Two linears writing the halves of one [m, 2n] buffer (gate and up
  // projections) give the same values as contiguous outputs and leave the
  // other half alone.
  std::mt19937 rng(5);
  const int64_t m = 5, k = 70, n = 19, ldy = 2 * n;
  const auto x = random_vec(m * k, rng);
  const auto wf = random_vec(n * k, rng);
  const auto wb = to_bf16(wf);
  for (DType dt : {DType::F32, DType::BF16}) {
    const Matrix w = make_matrix(dt, wf, wb, n, k);
    std::vector<float> contiguous(m * n), strided(m * ldy, -7.0f), strided_ref(m * ldy, -7.0f);
    linear(x.data(), m, w, nullptr, contiguous.data());
    linear(x.data(), m, w, nullptr, strided.data() + n, ldy);
    const auto x_ref =
        dt == DType::BF16 && rounds_bf16_activations(GetParam()) ? bf16_rounded(x) : x;
    ref::linear(x_ref.data(), m, w, nullptr, strided_ref.data() + n, ldy);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        EXPECT_EQ(strided[i * ldy + j], -7.0f) << i << "," << j;
        EXPECT_EQ(strided[i * ldy + n + j], contiguous[i * n + j]) << i << "," << j;
        EXPECT_NEAR(strided_ref[i * ldy + n + j], contiguous[i * n + j], 1e-4) << i << "," << j;
      }
    }
  }
}

TEST_P(Linear, Bf16WeightsAreWidenedExactly) {
  // bf16 weights must be widened to f32 exactly and multiplied in f32 (no
  // rounding of activations): the result equals linear on the widened f32
  // matrix bit for bit. The bf16 dot-product ISA rounds the activations
  // instead, and only that: its result on x equals its result on x already
  // rounded to bf16, bit for bit (test_linear_bf16_dot.cpp checks the rest).
  std::mt19937 rng(2);
  const int64_t m = 6, k = 77, n = 21;
  const auto x = random_vec(m * k, rng);
  const auto wb = to_bf16(random_vec(n * k, rng));
  const Matrix w{wb.data(), DType::BF16, n, k};
  std::vector<float> y_bf16(m * n), y_expected(m * n);
  linear(x.data(), m, w, nullptr, y_bf16.data());
  if (rounds_bf16_activations(GetParam())) {
    const auto x_rounded = bf16_rounded(x);
    ASSERT_NE(x_rounded, x);
    linear(x_rounded.data(), m, w, nullptr, y_expected.data());
  } else {
    std::vector<float> widened(wb.size());
    for (size_t i = 0; i < wb.size(); ++i) widened[i] = bf16_to_f32(wb[i]);
    linear(x.data(), m, Matrix{widened.data(), DType::F32, n, k}, nullptr, y_expected.data());
  }
  EXPECT_EQ(y_bf16, y_expected);
}

TEST_P(Linear, RowsDoNotDependOnBatch) {
  // Greedy outputs must not depend on batch composition: row r of a batched
  // linear equals the same row computed alone, bit for bit, for every batch
  // size (row tiles and remainders) and column tail.
  std::mt19937 rng(3);
  const int64_t k = 300, n = 37;
  const auto x = random_vec(9 * k, rng);
  const auto wf = random_vec(n * k, rng);
  const auto wb = to_bf16(wf);
  const auto bias = random_vec(n, rng);
  for (DType dt : {DType::F32, DType::BF16}) {
    const Matrix w = make_matrix(dt, wf, wb, n, k);
    std::vector<float> alone(9 * n);
    for (int64_t r = 0; r < 9; ++r) linear(x.data() + r * k, 1, w, bias.data(), &alone[r * n]);
    for (int64_t m = 2; m <= 9; ++m) {
      std::vector<float> batched(m * n);
      linear(x.data(), m, w, bias.data(), batched.data());
      EXPECT_TRUE(std::equal(batched.begin(), batched.end(), alone.begin()))
          << "m=" << m << " dtype=" << dtype_name(dt);
    }
  }
}

TEST_P(Linear, TwoThreadsEqualOneBitForBit) {
  std::mt19937 rng(4);
  for (int64_t m : {1, 3, 8}) {
    const int64_t k = 512, n = 389;
    const auto x = random_vec(m * k, rng);
    const auto wf = random_vec(n * k, rng);
    const auto wb = to_bf16(wf);
    for (DType dt : {DType::F32, DType::BF16}) {
      const Matrix w = make_matrix(dt, wf, wb, n, k);
      std::vector<float> one(m * n), two(m * n);
      {
        ScopedThreads threads(1);
        linear(x.data(), m, w, nullptr, one.data());
      }
      {
        ScopedThreads threads(2);
        linear(x.data(), m, w, nullptr, two.data());
      }
      EXPECT_EQ(one, two) << "m=" << m << " dtype=" << dtype_name(dt);
    }
  }
}

TEST_P(Linear, EmptyBatchWritesNothing) {
  const std::vector<float> w(12, 1.0f);
  std::vector<float> y(4, 7.0f);
  linear(nullptr, 0, Matrix{w.data(), DType::F32, 4, 3}, nullptr, y.data());
  EXPECT_EQ(y, std::vector<float>(4, 7.0f));
}

TEST(LinearMultiChecks, BadCallsThrowNamingTheProblemBeforeWritingAnything) {
  // Each call differs from a valid one (the first case) in one argument; it
  // must throw pagoda's InternalError naming that argument, and leave every
  // output, including the valid one ahead of the bad one, unwritten.
  using ::testing::HasSubstr;
  using ::testing::ThrowsMessage;
  const int64_t m = 2, k = 8, n = 4;
  const std::vector<float> x(m * k, 1.0f), w(n * (k + 1), 0.5f);
  const Matrix good{w.data(), DType::F32, n, k};
  const Matrix wide{w.data(), DType::F32, n, k + 1};
  const Matrix f16{w.data(), DType::F16, n, k};
  const Matrix i8_without_scales{w.data(), DType::I8, n, k};
  const std::vector<float> untouched(m * n, -1.0f);
  std::vector<float> y0 = untouched, y1 = untouched;
  const LinearOutput first{&good, nullptr, y0.data()};
  const std::vector<LinearOutput> too_many(kMaxLinearOutputs + 1, first);
  struct BadCall {
    std::vector<LinearOutput> outs;
    int count;
    std::string message;
  };
  const std::string max = std::to_string(kMaxLinearOutputs);
  const BadCall bad_calls[] = {
      {{first}, 0, "linear_multi: 0 outputs (1 to " + max + " allowed)"},
      {too_many, kMaxLinearOutputs + 1,
       "linear_multi: " + std::to_string(kMaxLinearOutputs + 1) + " outputs (1 to " + max +
           " allowed)"},
      {{first, {&wide, nullptr, y1.data()}}, 2, "linear_multi: output 1 has 9 cols, x has 8"},
      {{first, {&good, nullptr, y1.data(), n - 1}}, 2, "linear: output stride 3 < 4 rows"},
      {{first, {&f16, nullptr, y1.data()}}, 2, "linear: unsupported weight dtype F16"},
      {{first, {&i8_without_scales, nullptr, y1.data()}}, 2, "linear: not an I8 matrix (I8)"},
  };
  for (const BadCall& call : bad_calls) {
    EXPECT_THAT([&] { linear_multi(x.data(), m, call.outs.data(), call.count); },
                ThrowsMessage<InternalError>(HasSubstr(call.message)));
    EXPECT_EQ(y0, untouched) << call.message;
    EXPECT_EQ(y1, untouched) << call.message;
  }
  // The valid call they are variants of does write both outputs.
  const LinearOutput valid[] = {first, {&good, nullptr, y1.data()}};
  linear_multi(x.data(), m, valid, 2);
  EXPECT_EQ(y0, std::vector<float>(m * n, 4.0f));
  EXPECT_EQ(y1, y0);
}

INSTANTIATE_TEST_SUITE_P(AllSupported, Linear, ::testing::ValuesIn(supported_isas()),
                         isa_test_name);

}  // namespace
}  // namespace pagoda::ops::testing
