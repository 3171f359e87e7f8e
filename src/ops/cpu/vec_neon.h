// 4 x f32 NEON (AArch64 Advanced SIMD) vector helpers. NEON and FMA are
// part of every AArch64 CPU, so no target attribute is needed; the kernel
// shapes follow AVX-512's (both have 32 vector registers), with a quarter
// of the lanes.
#pragma once

#include <arm_neon.h>

#include <cstdint>
#include <cstring>

#define PAGODA_TARGET

namespace pagoda::ops::neon {

constexpr int kLanes = 4;
// 32 q registers: a 4 x 4 tile keeps 16 accumulators + 4 x rows + 1
// weight vector live (as avx512's); a lone row streams 8 weight rows.
constexpr int kRowTile = 4, kColTile = 4, kSingleRowCols = 8;

using Vec = float32x4_t;

inline Vec vzero() { return vdupq_n_f32(0.0f); }
inline Vec vset1(float s) { return vdupq_n_f32(s); }
inline Vec vload(const float* p) { return vld1q_f32(p); }

// bf16 -> f32 is exact: widen to 32 bits with the bf16 bits in the high half.
inline Vec vload(const uint16_t* p) { return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16)); }

// The first n (< kLanes) elements, zeros after; copies so it never reads
// past the end of the array.
template <typename T>
inline Vec vload_tail(const T* p, int n) {
  T buf[kLanes] = {};
  std::memcpy(buf, p, n * sizeof(T));
  return vload(buf);
}

// FP8 e4m3 bytes -> f32 times 2^-8, exactly: the bits moved into an f16
// (bias 15 = e4m3's 7 + 8) and widened by fcvtl, which also turns the e4m3
// subnormals into normal f32s (the trick of vec_avx2.h / vec_avx512.h).
inline Vec vload_e4m3(const uint8_t* p) {
  uint32_t four;
  std::memcpy(&four, p, sizeof(four));
  const int16x4_t wide = vget_low_s16(vmovl_s8(vreinterpret_s8_u32(vdup_n_u32(four))));
  const int16x4_t h = vand_s16(vshl_n_s16(wide, 7), vdup_n_s16(static_cast<int16_t>(0xbfff)));
  return vcvt_f32_f16(vreinterpret_f16_s16(h));
}
inline Vec vload_e4m3_tail(const uint8_t* p, int n) {
  uint8_t buf[kLanes] = {};
  std::memcpy(buf, p, static_cast<size_t>(n));
  return vload_e4m3(buf);
}

// FP4 e2m1 (ops.h F4E2M1): the 8 magnitudes times one block's scale, as a
// 32-byte table for tbl; the sign (code bit 3) is applied by xor (exact).
struct E2m1Table {
  uint8x16x2_t bytes;
};
inline E2m1Table e2m1_table(float scale) {
  static const float kMagnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const Vec s = vdupq_n_f32(scale);
  E2m1Table t;
  t.bytes.val[0] = vreinterpretq_u8_f32(vmulq_f32(vld1q_f32(kMagnitudes), s));
  t.bytes.val[1] = vreinterpretq_u8_f32(vmulq_f32(vld1q_f32(kMagnitudes + 4), s));
  return t;
}
// kLanes weights from kLanes / 2 bytes, in column order (byte j: low nibble
// lane 2j, high nibble lane 2j + 1): each lane's magnitude index m picks
// table bytes 4m .. 4m + 3.
inline Vec vload_e2m1(const uint8_t* p, const E2m1Table& t) {
  const uint32_t b0 = p[0], b1 = p[1];
  const uint32x4_t codes = {b0 & 15u, b0 >> 4, b1 & 15u, b1 >> 4};
  const uint32x4_t m = vandq_u32(codes, vdupq_n_u32(7));
  const uint32x4_t idx = vmlaq_n_u32(vdupq_n_u32(0x03020100u), m, 0x04040404u);
  const uint32x4_t mag = vreinterpretq_u32_u8(vqtbl2q_u8(t.bytes, vreinterpretq_u8_u32(idx)));
  const uint32x4_t sign = vshlq_n_u32(vandq_u32(codes, vdupq_n_u32(8)), 28);
  return vreinterpretq_f32_u32(veorq_u32(mag, sign));
}

inline void vstore(float* p, Vec a) { vst1q_f32(p, a); }

// Values bf16 holds exactly (e.g. e4m3 times a power of two) -> their bf16
// bits, the high halves of the f32s: no rounding.
inline uint16x4_t bf16_halves(Vec a) { return vshrn_n_u32(vreinterpretq_u32_f32(a), 16); }
inline void vstore_bf16_exact(uint16_t* p, Vec a) { vst1_u16(p, bf16_halves(a)); }
inline void vstore_bf16_exact_tail(uint16_t* p, Vec a, int n) {
  uint16_t buf[kLanes];
  vst1_u16(buf, bf16_halves(a));
  std::memcpy(p, buf, n * sizeof(uint16_t));
}
inline void vstore_tail(float* p, Vec a, int n) {
  float buf[kLanes];
  vst1q_f32(buf, a);
  std::memcpy(p, buf, n * sizeof(float));
}

inline Vec vfma(Vec a, Vec b, Vec c) { return vfmaq_f32(c, a, b); }
inline Vec vadd(Vec a, Vec b) { return vaddq_f32(a, b); }
inline Vec vmul(Vec a, Vec b) { return vmulq_f32(a, b); }
inline Vec vdiv(Vec a, Vec b) { return vdivq_f32(a, b); }

// (a0 + a2) + (a1 + a3): the high half folded onto the low half, as every
// variant sums. That tree gives the same bits when the lanes are rotated
// (a sliding-window query's keys start a few lanes later in the chunk of
// its batch than alone: attention's denominators rely on it); the pairwise
// faddp tree, (a0 + a1) + (a2 + a3), does not. vsum4 sums each vector alike.
inline float vsum(Vec a) {
  const float32x2_t h = vadd_f32(vget_low_f32(a), vget_high_f32(a));
  return vget_lane_f32(h, 0) + vget_lane_f32(h, 1);
}

inline void vsum4(Vec a, Vec b, Vec c, Vec d, float* out) {
  // Transposed, lane i of (lo + hi) is (v0 + v2) of vector i, then + (v1 + v3).
  const float32x4x2_t ab = vtrnq_f32(a, b), cd = vtrnq_f32(c, d);
  const Vec l0 = vcombine_f32(vget_low_f32(ab.val[0]), vget_low_f32(cd.val[0]));
  const Vec l1 = vcombine_f32(vget_low_f32(ab.val[1]), vget_low_f32(cd.val[1]));
  const Vec l2 = vcombine_f32(vget_high_f32(ab.val[0]), vget_high_f32(cd.val[0]));
  const Vec l3 = vcombine_f32(vget_high_f32(ab.val[1]), vget_high_f32(cd.val[1]));
  vst1q_f32(out, vaddq_f32(vaddq_f32(l0, l2), vaddq_f32(l1, l3)));
}

// a < b ? a : b (and the reverse), as x86's minps/maxps and the scalar
// variant pick: the same operand when one is NaN (fmin/fmax would not).
inline Vec vmin(Vec a, Vec b) { return vbslq_f32(vcltq_f32(a, b), a, b); }
inline Vec vmax(Vec a, Vec b) { return vbslq_f32(vcgtq_f32(a, b), a, b); }
// Round to the nearest integer (ties to even), as a float.
inline Vec vround(Vec a) { return vrndnq_f32(a); }
// Lanes (0, 1), (2, 3) swapped (interleaved RoPE pairs).
inline Vec vswap_pairs(Vec a) { return vrev64q_f32(a); }
// a * 2^n for integral n in [-126, 127]: 2^n built in the exponent field.
inline Vec vldexp(Vec a, Vec n) {
  const int32x4_t bits = vshlq_n_s32(vaddq_s32(vcvtnq_s32_f32(n), vdupq_n_s32(127)), 23);
  return vmulq_f32(a, vreinterpretq_f32_s32(bits));
}

}  // namespace pagoda::ops::neon
