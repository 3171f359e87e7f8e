// Portable 4-lane vector for the Scalar kernels, for baseline x86-64 (or any
// target): no intrinsics, no ISA assumptions. Lane order and the reduction
// tree are fixed, so results are deterministic.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/dtype.h"

#define PAGODA_TARGET

namespace pagoda::ops::scalar {

// 4 lanes: one SSE2 register, so values pass natively (8 would change the
// vector ABI and spill).
constexpr int kLanes = 4;
// linear tiles: kRowTile x rows by kColTile weight rows; lone rows use
// kSingleRowCols weight rows at a time.
constexpr int kRowTile = 4, kColTile = 2, kSingleRowCols = 8;

// GCC/Clang generic vector: element-wise operators that the compiler lowers
// to whatever the baseline target has (SSE2 here).
typedef float Vec __attribute__((vector_size(kLanes * sizeof(float))));

inline Vec vzero() { return Vec{}; }
inline Vec vset1(float s) { return Vec{} + s; }

inline Vec vload(const float* p) {
  Vec r;
  std::memcpy(&r, p, sizeof(r));
  return r;
}

// bf16 -> f32 is exact: the bf16 bits are the high half of the f32.
inline Vec vload(const uint16_t* p) {
  typedef uint16_t Half __attribute__((vector_size(kLanes * sizeof(uint16_t))));
  typedef uint32_t Bits __attribute__((vector_size(kLanes * sizeof(uint32_t))));
  Half h;
  std::memcpy(&h, p, sizeof(h));
  const Bits bits = __builtin_convertvector(h, Bits) << 16;
  Vec r;
  std::memcpy(&r, &bits, sizeof(r));
  return r;
}

// The first n (< kLanes) elements, zeros after.
template <typename T>
inline Vec vload_tail(const T* p, int n) {
  T buf[kLanes] = {};
  std::memcpy(buf, p, n * sizeof(T));
  return vload(buf);
}

// FP8 e4m3 bytes -> f32 times 2^-8 (the convention of the SIMD variants,
// whose f16 trick yields that), exactly: table value times a power of two.
inline Vec vload_e4m3(const uint8_t* p) {
  Vec r;
  for (int i = 0; i < kLanes; ++i) r[i] = f8e4m3_to_f32(p[i]) * (1.0f / 256.0f);
  return r;
}
// FP4 e2m1 (ops.h F4E2M1): the 16 code values times one block's scale.
struct E2m1Table {
  float v[16];
};
inline E2m1Table e2m1_table(float scale) {
  E2m1Table t;
  for (int c = 0; c < 16; ++c) t.v[c] = f4e2m1_to_f32(static_cast<uint8_t>(c)) * scale;
  return t;
}
// kLanes weights from kLanes / 2 bytes, low nibble first.
inline Vec vload_e2m1(const uint8_t* p, const E2m1Table& t) {
  Vec r;
  for (int i = 0; i < kLanes; ++i) r[i] = t.v[(p[i / 2] >> (4 * (i % 2))) & 15];
  return r;
}

inline Vec vload_e4m3_tail(const uint8_t* p, int n) {
  Vec r = vzero();
  for (int i = 0; i < n; ++i) r[i] = f8e4m3_to_f32(p[i]) * (1.0f / 256.0f);
  return r;
}

inline void vstore(float* p, Vec a) { std::memcpy(p, &a, sizeof(a)); }
inline void vstore_tail(float* p, Vec a, int n) { std::memcpy(p, &a, n * sizeof(float)); }

// a * b + c; baseline x86-64 has no FMA instruction, so two roundings.
inline Vec vfma(Vec a, Vec b, Vec c) { return a * b + c; }
inline Vec vadd(Vec a, Vec b) { return a + b; }
inline Vec vmul(Vec a, Vec b) { return a * b; }
inline Vec vdiv(Vec a, Vec b) { return a / b; }

inline float vsum(Vec a) { return (a[0] + a[2]) + (a[1] + a[3]); }

inline void vsum4(Vec a, Vec b, Vec c, Vec d, float* out) {
  out[0] = vsum(a);
  out[1] = vsum(b);
  out[2] = vsum(c);
  out[3] = vsum(d);
}

inline Vec vmin(Vec a, Vec b) { return a < b ? a : b; }
inline Vec vmax(Vec a, Vec b) { return a > b ? a : b; }
// Round to the nearest integer (ties to even), as a float.
inline Vec vround(Vec a) {
  for (int i = 0; i < kLanes; ++i)
    a[i] = std::nearbyint(a[i]);  // default rounding: to nearest even
  return a;
}
// Lanes (0, 1), (2, 3) swapped (interleaved RoPE pairs).
inline Vec vswap_pairs(Vec a) { return Vec{a[1], a[0], a[3], a[2]}; }
// a * 2^n for integral n in [-126, 127].
inline Vec vldexp(Vec a, Vec n) {
  for (int i = 0; i < kLanes; ++i) a[i] = std::ldexp(a[i], static_cast<int>(n[i]));
  return a;
}

}  // namespace pagoda::ops::scalar
