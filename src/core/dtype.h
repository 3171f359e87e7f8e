// Element types of weights and caches, and scalar conversions to f32.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace pagoda {

enum class DType : uint8_t { F32, BF16, F16, I8, I32, I64, U8 };

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

}  // namespace pagoda
