// Element types of weights and caches, and scalar conversions to f32.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace pagoda {

// F8E4M3 is float8_e4m3fn (safetensors "F8_E4M3"): 1 sign, 4 exponent
// (bias 7), 3 mantissa bits; subnormals, no infinities, 0x7F/0xFF NaN, max
// 448 (DeepSeek's FP8 weights). F8E8M0 ("F8_E8M0") is an exponent alone:
// 2^(e - 127), 0xFF NaN (the block scales of DeepSeek V4 checkpoints).
// F4E2M1 is never a file dtype: it names packed FP4 weight matrices in
// memory (ops.h Matrix; a checkpoint stores them as I8 bytes), two 4-bit
// e2m1 codes per byte, so dtype_size (bytes per element) does not describe
// it: FP4 data sizes come from ops.h (fp4_row_bytes).
enum class DType : uint8_t { F32, BF16, F16, I8, I32, I64, U8, F8E4M3, F8E8M0, F4E2M1 };

// Bytes per element.
constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32:
      return 4;
    case DType::BF16:
      return 2;
    case DType::F16:
      return 2;
    case DType::I8:
      return 1;
    case DType::U8:
      return 1;
    case DType::I32:
      return 4;
    case DType::I64:
      return 8;
    case DType::F8E4M3:
    case DType::F8E8M0:
      return 1;
    case DType::F4E2M1:  // half a byte: see the enum
      return 0;
  }
  return 0;
}

// Safetensors spelling ("F32", "BF16", ...).
std::string_view dtype_name(DType t);
// Returns false for names we do not support.
bool dtype_from_name(std::string_view name, DType* out);

using bf16_t = uint16_t;
using f16_t = uint16_t;

inline float bf16_to_f32(bf16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even; NaN stays NaN.
inline bf16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<bf16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<bf16_t>(bits >> 16);
}

float f16_to_f32(f16_t h);
f16_t f32_to_f16(float f);

// FP8 (see DType): exact widening through 256-entry tables computed at
// compile time from the format's definition (no static-initialisation
// order to worry about), so a conversion is one load.
namespace detail {
constexpr float pow2(int e) {  // exact: repeated doubling or halving
  float r = 1.0f;
  for (; e > 0; --e) r *= 2.0f;
  for (; e < 0; ++e) r *= 0.5f;
  return r;
}
struct Fp8Table {
  float v[256];
};
// e4m3fn: exponent field 0 is subnormal (m / 8 * 2^-6), otherwise
// (1 + m / 8) * 2^(e - 7); S.1111.111 is NaN.
constexpr Fp8Table make_e4m3_table() {
  Fp8Table t{};
  for (int c = 0; c < 256; ++c) {
    const int exp = (c >> 3) & 15, mant = c & 7;
    float mag = exp == 0 ? static_cast<float>(mant) * pow2(-9)
                         : static_cast<float>(8 + mant) * pow2(exp - 10);
    if (exp == 15 && mant == 7) mag = __builtin_nanf("");
    t.v[c] = c & 0x80 ? -mag : mag;
  }
  return t;
}
constexpr Fp8Table make_e8m0_table() {
  Fp8Table t{};
  for (int c = 0; c < 256; ++c) t.v[c] = c == 255 ? __builtin_nanf("") : pow2(c - 127);
  return t;
}
inline constexpr Fp8Table kF8E4M3 = make_e4m3_table();
inline constexpr Fp8Table kF8E8M0 = make_e8m0_table();
}  // namespace detail
inline float f8e4m3_to_f32(uint8_t v) { return detail::kF8E4M3.v[v]; }
inline float f8e8m0_to_f32(uint8_t v) { return detail::kF8E8M0.v[v]; }
// FP4 e2m1 (MXFP4, DeepSeek V4's routed experts): a 4-bit code is sign << 3
// | index into the magnitudes {0, 0.5, 1, 1.5, 2, 3, 4, 6} (code 8 is -0).
// Only the low 4 bits of `code` are read.
inline float f4e2m1_to_f32(uint8_t code) {
  constexpr float kMagnitude[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float m = kMagnitude[code & 7];
  return code & 8 ? -m : m;
}
// Round to nearest even, saturating: |f| beyond 448 (and infinities) gives
// +-448 (the "satfinite" conversion that FP8 quantisers use after clamping);
// NaN gives 0x7F with f's sign.
uint8_t f32_to_f8e4m3(float f);

}  // namespace pagoda
