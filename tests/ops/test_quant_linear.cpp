// Int8 linear on every supported ISA against the scalar reference
// (ops/reference.h): activation quantization and the integer linear must
// match it bit for bit, outputs must not depend on batch composition or
// thread count, and the quantized linear must stay close to the float one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ops/ops.h"
#include "ops/packed.h"
#include "ops/quant.h"
#include "ops/reference.h"
#include "ops_test_util.h"

namespace pagoda::ops::testing {
namespace {

class QuantLinear : public IsaTest {};

// Weights quantized per row with the reference, plus the row sums the
// VNNI kernel needs, computed here independently.
struct QuantMatrix {
  std::vector<int8_t> q;
  std::vector<float> scales;
  std::vector<int32_t> sums;
  Matrix m;

  QuantMatrix(const std::vector<float>& w, int64_t n, int64_t k) : q(n * k), scales(n), sums(n, 0) {
    for (int64_t r = 0; r < n; ++r) {
      scales[r] = ref::quantize_row_i8(w.data() + r * k, k, q.data() + r * k);
      for (int64_t c = 0; c < k; ++c) sums[r] += q[r * k + c];
    }
    m = Matrix{q.data(), DType::I8, n, k, scales.data(), sums.data()};
  }
};

// Random rows that exercise the extremes: +-127 after quantization, exact
// ties x * inv = j + 0.5, an all-zero row.
std::vector<float> activations(int64_t m, int64_t k, std::mt19937& rng) {
  auto x = random_vec(m * k, rng, 2.0f);
  if (m > 1) std::fill(x.begin() + k, x.begin() + 2 * k, 0.0f);  // row 1 all zero
  for (int64_t r = 0; r < m; r += 2) {
    if (k >= 3) {  // max 127 exactly: 63.5 and -2.5 are exact ties
      x[r * k] = 127.0f;
      x[r * k + 1] = 63.5f;
      x[r * k + 2] = -2.5f;
    }
  }
  return x;
}

TEST_P(QuantLinear, QuantizeRowsMatchesReference) {
  std::mt19937 rng(3);
  for (int64_t k : {1, 15, 16, 17, 63, 65, 1000}) {
    for (int64_t m : {1, 3, 64}) {
      const auto x = activations(m, k, rng);
      std::vector<int8_t> q(m * k, 99), q_ref(m * k);
      std::vector<float> s(m, NAN), s_ref(m);
      quantize_rows_i8(x.data(), m, k, q.data(), s.data());
      for (int64_t r = 0; r < m; ++r)
        s_ref[r] = ref::quantize_row_i8(x.data() + r * k, k, &q_ref[r * k]);
      EXPECT_EQ(q, q_ref) << "k=" << k << " m=" << m;
      EXPECT_EQ(0, std::memcmp(s.data(), s_ref.data(), m * sizeof(float))) << "k=" << k;
    }
  }
  // Ties round to even: with max 127 the scale is 1 and x * inv = x.
  const std::vector<float> x = {127.0f, 0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -127.0f, 3.49f};
  std::vector<int8_t> q(x.size());
  float s = 0;
  quantize_rows_i8(x.data(), 1, static_cast<int64_t>(x.size()), q.data(), &s);
  EXPECT_EQ(s, 1.0f);
  EXPECT_EQ(q, (std::vector<int8_t>{127, 0, 2, 2, 0, -2, -127, 3}));
}

TEST_P(QuantLinear, IntegerLinearMatchesReferenceBitForBit) {
  std::mt19937 rng(7);
  int checked = 0;
  for (int64_t k : {1, 63, 64, 65, 1000}) {
    for (int64_t n : {1, 5, 17, 40}) {
      for (int64_t m : {1, 3, 64}) {
        const auto wf = random_vec(n * k, rng);
        const QuantMatrix w(wf, n, k);
        const auto x = activations(m, k, rng);
        std::vector<int8_t> qx(m * k);
        std::vector<float> xs(m);
        for (int64_t r = 0; r < m; ++r) xs[r] = ref::quantize_row_i8(&x[r * k], k, &qx[r * k]);
        const auto bias = random_vec(n, rng);
        for (const float* b : {static_cast<const float*>(nullptr), bias.data()}) {
          // A wider output stride: the kernel writes only its columns.
          const int64_t ldy = n + 3;
          std::vector<float> y(m * ldy, -7.0f), y_ref(m * ldy, -7.0f), y_full(m * ldy, -7.0f);
          linear_i8_quantized(qx.data(), xs.data(), m, w.m, b, y.data(), ldy);
          ref::linear_i8_quantized(qx.data(), xs.data(), m, w.m, b, y_ref.data(), ldy);
          // The whole op (quantizing x itself) gives the same bits.
          linear(x.data(), m, w.m, b, y_full.data(), ldy);
          EXPECT_EQ(0, std::memcmp(y.data(), y_ref.data(), y.size() * sizeof(float)))
              << "k=" << k << " n=" << n << " m=" << m << " bias=" << (b != nullptr);
          EXPECT_EQ(0, std::memcmp(y_full.data(), y_ref.data(), y.size() * sizeof(float)))
              << "linear: k=" << k << " n=" << n << " m=" << m;
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 5 * 4 * 3 * 2);
}

TEST_P(QuantLinear, ExtremeValuesDoNotOverflow) {
  // Every product +-127 * 127, k at the limit: the unsigned-activation
  // (VNNI) form sums (127 + 128) * 127 per element in int32.
  for (int64_t k : {int64_t{4096}, kMaxInt8Cols}) {
    const int64_t n = 3, m = 2;
    std::vector<float> wf(n * k, 1.0f), x(m * k, 1.0f);
    for (int64_t i = 0; i < k; ++i) wf[2 * k + i] = (i % 2) ? 1.0f : -1.0f;
    const QuantMatrix w(wf, n, k);
    std::vector<float> y(m * n), y_ref(m * n);
    linear(x.data(), m, w.m, nullptr, y.data());
    std::vector<int8_t> qx(m * k);
    std::vector<float> xs(m);
    for (int64_t r = 0; r < m; ++r) xs[r] = ref::quantize_row_i8(&x[r * k], k, &qx[r * k]);
    ref::linear_i8_quantized(qx.data(), xs.data(), m, w.m, nullptr, y_ref.data());
    EXPECT_EQ(y, y_ref) << "k=" << k;
    EXPECT_FLOAT_EQ(y[0], static_cast<float>(k));
    EXPECT_FLOAT_EQ(y[2], 0.0f);
  }
}

TEST_P(QuantLinear, RowsDoNotDependOnBatchOrThreads) {
  // Decode (m = 1) and prefill (m = many) compute a row identically, and so
  // do 1 and 2 threads: greedy outputs must not depend on the batch.
  std::mt19937 rng(11);
  const int64_t k = 1000, n = 77, m = 67;
  const auto wf = random_vec(n * k, rng);
  const QuantMatrix w(wf, n, k);
  const auto x = random_vec(m * k, rng);
  for (int threads : {1, 2}) {
    ScopedThreads scoped(threads);
    std::vector<float> all(m * n);
    linear(x.data(), m, w.m, nullptr, all.data());
    for (int64_t r : {int64_t{0}, int64_t{5}, m - 1}) {
      std::vector<float> one(n);
      linear(x.data() + r * k, 1, w.m, nullptr, one.data());
      EXPECT_EQ(0, std::memcmp(one.data(), &all[r * n], n * sizeof(float)))
          << "row " << r << " threads " << threads;
    }
  }
}

TEST_P(QuantLinear, CloseToFloatLinear) {
  // Per-row int8 of both operands: the error of one output is about
  // sqrt(k) * (step_x * |w| + step_w * |x|) / sqrt(12), i.e. a relative
  // error of ~1% of the output's typical size for Gaussian data. Measured
  // here: ~0.8% RMS relative to RMS(y); bound 2%.
  std::mt19937 rng(13);
  const int64_t k = 1024, n = 256, m = 8;
  const auto wf = random_vec(n * k, rng);
  const auto x = random_vec(m * k, rng);
  const QuantMatrix w(wf, n, k);
  const Matrix wfm{wf.data(), DType::F32, n, k};
  std::vector<float> y(m * n), y_ref(m * n);
  linear(x.data(), m, w.m, nullptr, y.data());
  ref::linear(x.data(), m, wfm, nullptr, y_ref.data());
  double err2 = 0, ref2 = 0;
  for (int64_t i = 0; i < m * n; ++i) {
    err2 += (double{y[i]} - y_ref[i]) * (double{y[i]} - y_ref[i]);
    ref2 += double{y_ref[i]} * y_ref[i];
  }
  const double rel = std::sqrt(err2 / ref2);
  EXPECT_LT(rel, 0.02);
  EXPECT_GT(rel, 1e-4);  // it is quantized at all
  RecordProperty("relative_rms_error", std::to_string(rel));
}

TEST_P(QuantLinear, LinearMultiWithInt8OutputsEqualsSeparateCalls) {
  // One linear_multi quantizes x once and splits every output's columns in
  // one go: int8 (row-major and packed, the packed one into half of a
  // shared buffer) next to an f32 output, as q/k/v or gate/up are called.
  std::mt19937 rng(14);
  const int64_t k = 96;
  const QuantMatrix a(random_vec(70 * k, rng), 70, k), b(random_vec(130 * k, rng), 130, k);
  std::vector<uint8_t> panels(packed_bytes(130, k, DType::I8) + 64);
  void* at = panels.data() + (64 - reinterpret_cast<uintptr_t>(panels.data()) % 64) % 64;
  const Matrix b_packed = pack_matrix(b.m, at);
  ASSERT_TRUE(b_packed.packed);
  const auto cf = random_vec(40 * k, rng);
  const Matrix c{cf.data(), DType::F32, 40, k};
  const auto bias = random_vec(130, rng);
  for (int threads : {1, 2}) {
    ScopedThreads scoped(threads);
    for (int64_t m : {1, 7}) {
      const auto x = activations(m, k, rng);
      std::vector<float> ya(m * 70), ybc(m * 170), ea(m * 70), eb(m * 130), ec(m * 40);
      const LinearOutput outs[3] = {{&a.m, nullptr, ya.data()},
                                    {&b_packed, bias.data(), ybc.data(), 170},
                                    {&c, nullptr, ybc.data() + 130, 170}};
      linear_multi(x.data(), m, outs, 3);
      linear(x.data(), m, a.m, nullptr, ea.data());
      linear(x.data(), m, b.m, bias.data(), eb.data());
      linear(x.data(), m, c, nullptr, ec.data());
      EXPECT_EQ(ya, ea) << "m " << m << " threads " << threads;
      for (int64_t r = 0; r < m; ++r) {
        EXPECT_TRUE(
            std::equal(eb.begin() + r * 130, eb.begin() + (r + 1) * 130, ybc.begin() + r * 170))
            << "row " << r << " threads " << threads;
        EXPECT_TRUE(
            std::equal(ec.begin() + r * 40, ec.begin() + (r + 1) * 40, ybc.begin() + r * 170 + 130))
            << "row " << r << " threads " << threads;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllIsas, QuantLinear, ::testing::ValuesIn(supported_isas()),
                         isa_test_name);

#if defined(__x86_64__)
TEST(QuantLinearKernels, Avx512UsesVnniWhenTheCpuHasIt) {
  // The VNNI kernel is the one under test on such a CPU (not silently the
  // AVX2 fallback), under both AVX-512 levels.
  __builtin_cpu_init();
  const std::string expected = __builtin_cpu_supports("avx512vnni") ? "avx512-vnni" : "avx2";
  int levels = 0;
  for (const Isa isa : {Isa::Avx512, Isa::Avx512Bf16}) {
    if (!isa_supported(isa)) continue;
    set_isa(isa);
    EXPECT_EQ(std::string(int8_kernel_name()), expected) << isa_name(isa);
    ++levels;
  }
  set_isa(best_isa());
  if (levels == 0) GTEST_SKIP() << "no AVX-512 on this CPU";
}
#endif

#if defined(__aarch64__)
TEST(QuantLinearKernels, NeonLevelsPickTheirDotProduct) {
  // The sdot kernel is the one under test from NeonDot up (not silently
  // the smull one), and plain Neon keeps smull.
  set_isa(Isa::Neon);
  EXPECT_EQ(std::string(int8_kernel_name()), "neon");
  for (const Isa isa : {Isa::NeonDot, Isa::NeonBf16}) {
    if (!isa_supported(isa)) continue;
    set_isa(isa);
    EXPECT_EQ(std::string(int8_kernel_name()), "neon-sdot") << isa_name(isa);
  }
  set_isa(best_isa());
}
#endif

}  // namespace
}  // namespace pagoda::ops::testing
