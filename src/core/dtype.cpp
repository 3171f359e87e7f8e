#include "core/dtype.h"

#include <cmath>

namespace pagoda {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32:
      return "F32";
    case DType::BF16:
      return "BF16";
    case DType::F16:
      return "F16";
    case DType::I8:
      return "I8";
    case DType::U8:
      return "U8";
    case DType::I32:
      return "I32";
    case DType::I64:
      return "I64";
    case DType::F8E4M3:
      return "F8_E4M3";
    case DType::F8E8M0:
      return "F8_E8M0";
    case DType::F4E2M1:
      return "F4_E2M1";  // in messages only: files hold FP4 as I8 (dtype_from_name has no entry)
  }
  return "?";
}

bool dtype_from_name(std::string_view name, DType* out) {
  static constexpr std::pair<std::string_view, DType> kNames[] = {
      {"F32", DType::F32}, {"BF16", DType::BF16}, {"F16", DType::F16}, {"I8", DType::I8},
      {"U8", DType::U8},   {"I32", DType::I32},   {"I64", DType::I64},
      {"F8_E4M3", DType::F8E4M3}, {"F8_E8M0", DType::F8E8M0}};
  for (const auto& [n, t] : kNames) {
    if (n == name) {
      *out = t;
      return true;
    }
  }
  return false;
}

float f16_to_f32(f16_t h) {
  const uint32_t sign = (h >> 15) & 1u, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  float magnitude;
  if (exp == 0) {
    magnitude = std::ldexp(static_cast<float>(mant), -24);  // zero or subnormal
  } else if (exp == 31) {
    magnitude = mant ? NAN : INFINITY;
  } else {
    magnitude = std::ldexp(static_cast<float>(mant | 0x400u), static_cast<int>(exp) - 25);
  }
  return sign ? -magnitude : magnitude;
}

f16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<f16_t>(sign | 0x7e00u);   // NaN
  if (abs >= 0x477ff000u) return static_cast<f16_t>(sign | 0x7c00u);  // overflow -> inf
  if (abs < 0x38800000u) {                                            // subnormal / zero
    float a;
    std::memcpy(&a, &abs, 4);
    return static_cast<f16_t>(sign | static_cast<uint32_t>(std::nearbyint(a * 16777216.0f)));
  }
  uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);  // round to nearest even at bit 13
  return static_cast<f16_t>(sign | ((rounded - 0x38000000u) >> 13));
}


uint8_t f32_to_f8e4m3(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const auto sign = static_cast<uint8_t>((x >> 24) & 0x80u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7f;  // NaN
  if (abs >= 0x43e00000u) return sign | 0x7e;  // >= 448 (incl. inf): saturate
  if (abs < 0x3c800000u) {                      // below 2^-6: subnormal grid of 2^-9
    float a;
    std::memcpy(&a, &abs, 4);
    // a * 512 is exact and nearbyint rounds half to even; 8 (= 2^-6) is
    // also the code of the smallest normal, so the grids meet seamlessly.
    return sign | static_cast<uint8_t>(std::nearbyint(a * 512.0f));
  }
  // Normal: keep 3 of f32's 23 mantissa bits, rounding half to even at bit
  // 20 (a carry into the exponent is the right result), rebias 127 -> 7.
  const uint32_t rounded = abs + 0x7ffffu + ((abs >> 20) & 1u);
  const uint32_t code = (rounded >> 20) - ((127u - 7u) << 3);
  return sign | static_cast<uint8_t>(code > 0x7eu ? 0x7eu : code);
}

}  // namespace pagoda
