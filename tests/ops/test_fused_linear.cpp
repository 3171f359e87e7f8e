// silu_mul_linear and add_rms_norm_linear (ops.h): on every supported ISA,
// every weight kind and 1 or 2 threads, the same bits as the two ops called
// in turn, for decode rows (each thread computes the op's rows in its own
// copy) and for many rows (the op runs first, shared), with both ops'
// outputs written as the separate calls write them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/ops.h"
#include "ops/packed.h"
#include "ops/reference.h"
#include "ops_test_util.h"

namespace pagoda::ops::testing {
namespace {

class FusedLinear : public IsaTest {};

// One [n, k] weight matrix in each kind the linears take: f32, bf16 (row
// major and packed) and int8 (packed: the engine's --quantization int8).
struct Weights {
  std::vector<float> f32;
  std::vector<uint16_t> bf16, bf16_panels;
  std::vector<int8_t> q;
  std::vector<float> scales;
  std::vector<int32_t> sums;
  std::vector<uint8_t> i8_panels;
  std::vector<Matrix> kinds;

  Weights(int64_t n, int64_t k, std::mt19937& rng)
      : f32(random_vec(n * k, rng, 0.05f)),
        bf16(to_bf16(f32)),
        bf16_panels(packed_bytes(n, k, DType::BF16) / 2),
        q(n * k),
        scales(n),
        sums(n, 0),
        i8_panels(packed_bytes(n, k, DType::I8) + 64) {
    for (int64_t r = 0; r < n; ++r) {
      scales[r] = ref::quantize_row_i8(f32.data() + r * k, k, q.data() + r * k);
      for (int64_t c = 0; c < k; ++c) sums[r] += q[r * k + c];
    }
    const Matrix row_major_bf16{bf16.data(), DType::BF16, n, k};
    const Matrix i8{q.data(), DType::I8, n, k, scales.data(), sums.data()};
    void* at = i8_panels.data() + (64 - reinterpret_cast<uintptr_t>(i8_panels.data()) % 64) % 64;
    kinds = {Matrix{f32.data(), DType::F32, n, k}, row_major_bf16,
             pack_matrix(row_major_bf16, bf16_panels.data()), pack_matrix(i8, at)};
  }
};

std::string describe(const Matrix& w, int64_t m, int threads) {
  return std::string(dtype_name(w.dtype)) + (w.packed ? " packed" : "") + " m " +
         std::to_string(m) + " threads " + std::to_string(threads);
}

// k = 1024: fewer than 32 rows take the per-thread copy (entry.cpp), 40 not.
constexpr int64_t kWidth = 1024;
constexpr int64_t kRows[] = {1, 3, 40};

TEST_P(FusedLinear, SiluMulLinearEqualsSiluMulThenLinear) {
  std::mt19937 rng(31);
  const int64_t inter = kWidth, n = 200;
  const Weights down(n, inter, rng);
  for (int threads : {1, 2}) {
    ScopedThreads scoped(threads);
    for (int64_t m : kRows) {
      auto gate_up = random_vec(m * 2 * inter, rng, 2.0f);
      for (float limit : {0.0f, 1.5f}) {
        for (const Matrix& w : down.kinds) {
          std::vector<float> act(m * inter, -1.0f), y(m * n, -1.0f);
          std::vector<float> act_ref(m * inter), y_ref(m * n);
          silu_mul_linear(gate_up.data(), m, inter, act.data(), {&w, nullptr, y.data()}, limit);
          silu_mul(gate_up.data(), m, inter, act_ref.data(), limit);
          linear(act_ref.data(), m, w, nullptr, y_ref.data());
          EXPECT_EQ(act, act_ref) << describe(w, m, threads) << " limit " << limit;
          EXPECT_EQ(y, y_ref) << describe(w, m, threads) << " limit " << limit;
        }
      }
    }
  }
}

TEST_P(FusedLinear, AddRmsNormLinearEqualsAddRmsNormThenLinearMulti) {
  // Two outputs, the second into the right half of a shared buffer, as
  // gate/up are called; the residual is updated once.
  std::mt19937 rng(32);
  const int64_t h = kWidth, n = 96;
  const Weights first(n, h, rng), second(n, h, rng);
  const auto norm_weight = random_vec(h, rng);
  const float eps = 1e-6f;
  for (int threads : {1, 2}) {
    ScopedThreads scoped(threads);
    for (int64_t m : kRows) {
      const auto residual0 = random_vec(m * h, rng, 3.0f);
      const auto addend = random_vec(m * h, rng);
      for (size_t kind = 0; kind < first.kinds.size(); ++kind) {
        const Matrix& a = first.kinds[kind];
        const Matrix& b = second.kinds[(kind + 1) % second.kinds.size()];
        std::vector<float> residual = residual0, y(m * h, -1.0f), out(m * 2 * n, -1.0f);
        std::vector<float> residual_ref = residual0, y_ref(m * h), out_ref(m * 2 * n, -1.0f);
        const LinearOutput outs[2] = {{&a, nullptr, out.data(), 2 * n},
                                      {&b, nullptr, out.data() + n, 2 * n}};
        const LinearOutput outs_ref[2] = {{&a, nullptr, out_ref.data(), 2 * n},
                                          {&b, nullptr, out_ref.data() + n, 2 * n}};
        add_rms_norm_linear(residual.data(), addend.data(), norm_weight.data(), m, eps, y.data(),
                            outs, 2);
        add_rms_norm(residual_ref.data(), addend.data(), norm_weight.data(), m, h, eps,
                     y_ref.data());
        linear_multi(y_ref.data(), m, outs_ref, 2);
        const std::string what = describe(a, m, threads) + " + " + describe(b, m, threads);
        EXPECT_EQ(residual, residual_ref) << what;
        EXPECT_EQ(y, y_ref) << what;
        EXPECT_EQ(out, out_ref) << what;
      }
    }
  }
}

TEST(FusedLinearChecks, BadCallsThrowNamingTheProblemBeforeWritingAnything) {
  // A down matrix whose width is not the SwiGLU width, a negative clamp and
  // a bad output count are refused before any output, residual or
  // activation row is written.
  using ::testing::HasSubstr;
  using ::testing::ThrowsMessage;
  const int64_t m = 2, inter = 8, n = 4;
  const std::vector<float> wf(n * inter, 0.5f), gate_up(m * 2 * inter, 1.0f);
  const Matrix down{wf.data(), DType::F32, n, inter},
      narrow{wf.data(), DType::F32, n * 2, inter / 2};
  const std::vector<float> untouched(m * inter, -3.0f);
  std::vector<float> act = untouched, y = untouched;
  EXPECT_THAT(
      [&] {
        silu_mul_linear(gate_up.data(), m, inter, act.data(), {&narrow, nullptr, y.data()});
      },
      ThrowsMessage<InternalError>(HasSubstr("silu_mul_linear: 4 cols for 8 features")));
  EXPECT_THAT(
      [&] {
        silu_mul_linear(gate_up.data(), m, inter, act.data(), {&down, nullptr, y.data()}, -1.0f);
      },
      ThrowsMessage<InternalError>(HasSubstr("swiglu_limit -1")));
  std::vector<float> residual = untouched;
  EXPECT_THAT(
      [&] {
        add_rms_norm_linear(residual.data(), gate_up.data(), wf.data(), m, 1e-6f, act.data(),
                            nullptr, 0);
      },
      ThrowsMessage<InternalError>(HasSubstr("linear_multi: 0 outputs")));
  EXPECT_EQ(act, untouched);
  EXPECT_EQ(y, untouched);
  EXPECT_EQ(residual, untouched);
}

INSTANTIATE_TEST_SUITE_P(AllIsas, FusedLinear, ::testing::ValuesIn(supported_isas()),
                         isa_test_name);

}  // namespace
}  // namespace pagoda::ops::testing
