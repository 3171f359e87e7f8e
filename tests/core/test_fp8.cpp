// FP8 conversions (core/dtype.h) against values computed here from the
// formats' definitions with double arithmetic, independently of the
// library's tables and bit manipulation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>

#include "core/dtype.h"

namespace pagoda {
namespace {

// float8_e4m3fn: (-1)^s * 2^(e - 7) * (1 + m/8) for e > 0, 2^-6 * m/8 for
// e = 0; e = 15, m = 7 is NaN.
double e4m3_definition(int code) {
  const int s = code >> 7, e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7) return NAN;
  const double mag = e == 0 ? std::pow(2.0, -6) * (m / 8.0) : std::pow(2.0, e - 7) * (1 + m / 8.0);
  return s ? -mag : mag;
}

TEST(Fp8, E4M3AllCodesMatchTheDefinition) {
  for (int c = 0; c < 256; ++c) {
    const double want = e4m3_definition(c);
    const float got = f8e4m3_to_f32(static_cast<uint8_t>(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << c;
      continue;
    }
    EXPECT_EQ(static_cast<double>(got), want) << "code " << c;
    EXPECT_EQ(std::signbit(got), c >= 128) << c;  // -0 stays -0
  }
  EXPECT_EQ(f8e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(f8e4m3_to_f32(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_TRUE(std::isnan(f8e4m3_to_f32(0x7f)));
  EXPECT_TRUE(std::isnan(f8e4m3_to_f32(0xff)));
}

TEST(Fp8, E8M0AllCodesArePowersOfTwo) {
  for (int c = 0; c < 255; ++c) {
    EXPECT_EQ(static_cast<double>(f8e8m0_to_f32(static_cast<uint8_t>(c))), std::pow(2.0, c - 127))
        << c;
  }
  EXPECT_TRUE(std::isnan(f8e8m0_to_f32(0xff)));
  EXPECT_EQ(f8e8m0_to_f32(127), 1.0f);
}

TEST(Fp8, E4M3EveryFiniteCodeRoundTrips) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;
    EXPECT_EQ(f32_to_f8e4m3(f8e4m3_to_f32(static_cast<uint8_t>(c))), c) << c;
  }
}

TEST(Fp8, E4M3RoundsMidpointsToEvenAndSaturates) {
  // Between consecutive non-negative finite codes c and c + 1: the exact
  // midpoint goes to the even code, anything nearer to its nearer code.
  for (int c = 0; c < 0x7e; ++c) {
    const double lo = e4m3_definition(c), hi = e4m3_definition(c + 1);
    const double mid = (lo + hi) / 2;  // exact in f32 (one more bit)
    const int even = c % 2 == 0 ? c : c + 1;
    EXPECT_EQ(f32_to_f8e4m3(static_cast<float>(mid)), even) << "midpoint above code " << c;
    EXPECT_EQ(f32_to_f8e4m3(static_cast<float>(-mid)), 0x80 | even) << c;
    const float below = std::nextafter(static_cast<float>(mid), 0.0f);
    const float above = std::nextafter(static_cast<float>(mid), INFINITY);
    EXPECT_EQ(f32_to_f8e4m3(below), c) << c;
    EXPECT_EQ(f32_to_f8e4m3(above), c + 1) << c;
  }
  EXPECT_EQ(f32_to_f8e4m3(464.0f), 0x7e);  // would round up to 480: saturates
  EXPECT_EQ(f32_to_f8e4m3(1e30f), 0x7e);
  EXPECT_EQ(f32_to_f8e4m3(-INFINITY), 0xfe);
  EXPECT_EQ(f32_to_f8e4m3(NAN) & 0x7f, 0x7f);
  EXPECT_EQ(f32_to_f8e4m3(std::ldexp(1.0f, -11)), 0x00);  // a quarter ulp: to zero
  EXPECT_EQ(f32_to_f8e4m3(std::ldexp(1.0f, -10)), 0x00);  // half ulp: tie to even 0
  EXPECT_EQ(f32_to_f8e4m3(std::ldexp(3.0f, -10)), 0x02);  // 1.5 ulp: tie to even 2
  EXPECT_EQ(f32_to_f8e4m3(std::ldexp(3.0f, -11)), 0x01);  // 0.75 ulp: up to 1
}

TEST(Fp8, E4M3RandomValuesGoToTheNearestCode) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-500.0f, 500.0f);
  for (int i = 0; i < 20000; ++i) {
    const float f = dist(rng) * std::pow(2.0f, static_cast<float>(i % 20) - 12.0f);
    const uint8_t q = f32_to_f8e4m3(f);
    const double err = std::fabs(static_cast<double>(f8e4m3_to_f32(q)) - f);
    for (int c = 0; c < 256; ++c) {  // no finite code is strictly nearer
      const double v = e4m3_definition(c);
      if (std::isnan(v) || std::fabs(f) > 448) continue;
      ASSERT_LE(err, std::fabs(v - f)) << f << " -> " << int{q} << " but " << c << " is nearer";
    }
  }
}

TEST(Fp8, Names) {
  DType t;
  ASSERT_TRUE(dtype_from_name("F8_E4M3", &t));
  EXPECT_EQ(t, DType::F8E4M3);
  ASSERT_TRUE(dtype_from_name("F8_E8M0", &t));
  EXPECT_EQ(t, DType::F8E8M0);
  EXPECT_EQ(dtype_name(DType::F8E4M3), "F8_E4M3");
  EXPECT_EQ(dtype_size(DType::F8E4M3), 1u);
  EXPECT_EQ(dtype_size(DType::F8E8M0), 1u);
}

}  // namespace
}  // namespace pagoda
