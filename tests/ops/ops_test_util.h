// Shared helpers for the kernel tests: random data, bf16 packing, a
// NaN-aware closeness check, and a fixture that runs a test once per ISA
// this CPU supports.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/parallel.h"
#include "ops/ops.h"

namespace pagoda::ops::testing {

inline std::vector<float> random_vec(size_t n, std::mt19937& rng, float stddev = 1.0f) {
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

inline std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = f32_to_bf16(v[i]);
  return out;
}

// Every |a[i] - b[i]| <= tol * max(1, max |b|). NaN anywhere fails.
inline void expect_close(const std::vector<float>& a, const std::vector<float>& b, float tol,
                         const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  float scale = 1.0f;
  for (float x : b) scale = std::max(scale, std::fabs(x));
  int bad = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!(std::fabs(a[i] - b[i]) <= tol * scale)) {
      if (++bad <= 3) ADD_FAILURE() << what << ": [" << i << "] " << a[i] << " vs " << b[i];
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

// Whether linear with bf16 weights rounds the activations to bf16 on this
// ISA (the vdpbf16ps and bfdot paths) instead of widening the weights to f32.
inline bool rounds_bf16_activations(Isa isa) {
  return isa == Isa::Avx512Bf16 || isa == Isa::NeonBf16;
}

// v rounded to bf16 (round-to-nearest-even) and back to f32.
inline std::vector<float> bf16_rounded(const std::vector<float>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = bf16_to_f32(f32_to_bf16(v[i]));
  return out;
}

inline std::string isa_test_name(const ::testing::TestParamInfo<Isa>& info) {
  return isa_name(info.param);
}

// e4m3 by exhaustive search over the finite codes (nearest value, ties to
// the even code, saturating at 448): independent of core/dtype.h.
inline double e4m3_value(int code) {
  const int e = (code >> 3) & 15, m = code & 7;
  const double mag = e == 0 ? m / 8.0 * std::ldexp(1.0, -6) : (1 + m / 8.0) * std::ldexp(1.0, e - 7);
  return code & 0x80 ? -mag : mag;
}
inline uint8_t e4m3_sim(float x) {
  const double a = std::fabs(double(x));
  int best = 0x7E;  // 448
  if (a < 448) {
    double best_err = INFINITY;
    for (int c = 0; c <= 0x7E; ++c) {
      const double err = std::fabs(e4m3_value(c) - a);
      if (err < best_err || (err == best_err && (c & 1) == 0)) best = c, best_err = err;
    }
  }
  return uint8_t(best | (std::signbit(x) ? 0x80 : 0));
}

// Selects the parameter's ISA for the test and restores the default after.
class IsaTest : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override { set_isa(GetParam()); }
  void TearDown() override { set_isa(best_isa()); }
};

// Runs a scope with a given kernel thread count, restoring the old one.
class ScopedThreads {
 public:
  explicit ScopedThreads(int n) : old_(num_threads()) { set_num_threads(n); }
  ~ScopedThreads() { set_num_threads(old_); }

 private:
  int old_;
};

}  // namespace pagoda::ops::testing

namespace pagoda::ops {
// Readable ISA names in gtest messages.
inline void PrintTo(Isa isa, std::ostream* os) { *os << isa_name(isa); }
}  // namespace pagoda::ops
