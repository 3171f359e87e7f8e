// bf16/f16 conversions against bit-exact definitions computed independently
// (bf16: truncation of the f32 pattern after round-to-nearest-even).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "core/dtype.h"

namespace pagoda {
namespace {

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

TEST(DType, Bf16RoundTripsExactlyRepresentableValues) {
  for (float f : {0.0f, -0.0f, 1.0f, -2.5f, 65536.0f, 1.0f / 256}) {
    EXPECT_EQ(bf16_to_f32(f32_to_bf16(f)), f);
  }
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(INFINITY)), INFINITY);
}

TEST(DType, Bf16RoundsToNearestEven) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1e4f, 1e4f);
  for (int i = 0; i < 100000; ++i) {
    const float f = dist(rng);
    const float r = bf16_to_f32(f32_to_bf16(f));
    // The two bf16 neighbours of f bracket it; r must be the nearer one.
    const float lo = bf16_to_f32(static_cast<bf16_t>(bits(f) >> 16));
    uint32_t hi_bits = ((bits(f) >> 16) + 1) << 16;
    float hi;
    std::memcpy(&hi, &hi_bits, 4);
    const float dlo = std::fabs(f - lo), dhi = std::fabs(hi - f);
    if (dlo < dhi) {
      EXPECT_EQ(r, lo);
    }
    if (dhi < dlo) {
      EXPECT_EQ(r, hi);
    }
    if (dlo == dhi) {
      EXPECT_EQ(bits(r) >> 16 & 1, 0u);  // tie: even mantissa
    }
  }
}

TEST(DType, F16MatchesIeeeHalf) {
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(f16_to_f32(0x7c00), INFINITY);
  // Every finite half round-trips through f32.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00) continue;
    EXPECT_EQ(f32_to_f16(f16_to_f32(static_cast<f16_t>(h))), h) << h;
  }
  EXPECT_EQ(f32_to_f16(1e6f), 0x7c00);
}

TEST(DType, Names) {
  DType t;
  ASSERT_TRUE(dtype_from_name("BF16", &t));
  EXPECT_EQ(t, DType::BF16);
  EXPECT_EQ(dtype_name(DType::F16), "F16");
  EXPECT_FALSE(dtype_from_name("F8_E9", &t));
}

}  // namespace
}  // namespace pagoda
