// 8 x f32 AVX2 vector helpers; every function carries the avx2,fma target so
// the rest of the binary stays baseline x86-64.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

// f16c (vcvtph2ps, every AVX2 CPU has it; dispatch checks) widens FP8.
#define PAGODA_TARGET __attribute__((target("avx2,fma,f16c")))

namespace pagoda::ops::avx2 {

constexpr int kLanes = 8;
// 16 ymm registers: a 4 x 2 tile keeps 8 accumulators + 4 x rows + 1 weight
// vector live; a lone row streams 8 weight rows (8 independent FMA chains).
constexpr int kRowTile = 4, kColTile = 2, kSingleRowCols = 8;

using Vec = __m256;

PAGODA_TARGET inline Vec vzero() { return _mm256_setzero_ps(); }
PAGODA_TARGET inline Vec vset1(float s) { return _mm256_set1_ps(s); }
PAGODA_TARGET inline Vec vload(const float* p) { return _mm256_loadu_ps(p); }

// bf16 -> f32 is exact: zero-extend to 32 bits and shift into the high half.
PAGODA_TARGET inline Vec vload(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// The first n (< kLanes) elements, zeros after; copies so it never reads
// past the end of the array.
template <typename T>
PAGODA_TARGET inline Vec vload_tail(const T* p, int n) {
  alignas(32) T buf[kLanes] = {};
  std::memcpy(buf, p, n * sizeof(T));
  return vload(buf);
}

// FP8 e4m3 bytes -> f32 times 2^-8, exactly: the bits moved into an f16
// (bias 15 = e4m3's 7 + 8) and widened by vcvtph2ps, which also turns the
// e4m3 subnormals into normal f32s; see vec_avx512.h.
PAGODA_TARGET inline Vec e4m3_bytes_to_vec(__m128i bytes) {
  const __m128i h = _mm_and_si128(_mm_slli_epi16(_mm_cvtepi8_epi16(bytes), 7),
                                  _mm_set1_epi16(static_cast<short>(0xbfff)));
  return _mm256_cvtph_ps(h);
}
PAGODA_TARGET inline Vec vload_e4m3(const uint8_t* p) {
  return e4m3_bytes_to_vec(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}
PAGODA_TARGET inline Vec vload_e4m3_tail(const uint8_t* p, int n) {
  uint8_t buf[16] = {};
  std::memcpy(buf, p, static_cast<size_t>(n));
  return vload_e4m3(buf);
}

// FP4 e2m1 (ops.h F4E2M1): the 8 magnitudes times one block's scale; the
// sign (code bit 3) is applied by xor (exact either way).
using E2m1Table = __m256;
PAGODA_TARGET inline E2m1Table e2m1_table(float scale) {
  const __m256 values = _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
  return _mm256_mul_ps(values, _mm256_set1_ps(scale));
}
// kLanes weights from kLanes / 2 bytes, in column order (byte j: low nibble
// lane 2j, high nibble lane 2j + 1): each byte zero-extended to a qword and
// or-ed with itself shifted by 28 (high nibble to the bottom of the upper
// dword); vpermps reads the low 3 bits, bit 3 shifted to 31 is the sign.
PAGODA_TARGET inline Vec vload_e2m1(const uint8_t* p, E2m1Table t) {
  int32_t four;
  std::memcpy(&four, p, sizeof(four));
  const __m256i q = _mm256_cvtepu8_epi64(_mm_cvtsi32_si128(four));
  const __m256i idx = _mm256_or_si256(q, _mm256_slli_epi64(q, 28));
  const __m256i sign = _mm256_and_si256(_mm256_slli_epi32(idx, 28),
                                        _mm256_set1_epi32(static_cast<int>(0x80000000u)));
  return _mm256_xor_ps(_mm256_permutevar8x32_ps(t, idx), _mm256_castsi256_ps(sign));
}

PAGODA_TARGET inline void vstore(float* p, Vec a) { _mm256_storeu_ps(p, a); }

// Values bf16 holds exactly (e.g. e4m3 times a power of two) -> their bf16
// bits, the high halves of the f32s: no rounding. packus keeps the
// 16-bit halves (all <= 0xffff) per 128-bit lane; the permute orders them.
PAGODA_TARGET inline __m128i bf16_halves(Vec a) {
  const __m256i h = _mm256_srli_epi32(_mm256_castps_si256(a), 16);
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(h, h), 0x08);
  return _mm256_castsi256_si128(packed);
}
PAGODA_TARGET inline void vstore_bf16_exact(uint16_t* p, Vec a) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), bf16_halves(a));
}
PAGODA_TARGET inline void vstore_bf16_exact_tail(uint16_t* p, Vec a, int n) {
  alignas(16) uint16_t buf[kLanes];
  _mm_store_si128(reinterpret_cast<__m128i*>(buf), bf16_halves(a));
  std::memcpy(p, buf, n * sizeof(uint16_t));
}
PAGODA_TARGET inline void vstore_tail(float* p, Vec a, int n) {
  alignas(32) float buf[kLanes];
  _mm256_store_ps(buf, a);
  std::memcpy(p, buf, n * sizeof(float));
}

// One pair row of a packed bf16 panel (ops/packed.h) widened: the words
// hold kLanes columns' (even, odd) input pairs; the even inputs' weights are
// the words shifted left by 16, the odd ones the words with the low half
// cleared, both exact f32s (2 integer ops per 2 * kLanes weights).
PAGODA_TARGET inline void vload_bf16_pairs(const uint16_t* p, Vec& even, Vec& odd) {
  const __m256i words = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  even = _mm256_castsi256_ps(_mm256_slli_epi32(words, 16));
  odd = _mm256_castsi256_ps(
      _mm256_and_si256(words, _mm256_set1_epi32(static_cast<int32_t>(0xffff0000u))));
}
// x[0] in every lane, loaded where it is used: as an asm statement, so the
// compiler cannot hoist a tile's broadcasts and keep them live (it would,
// and spill them).
PAGODA_TARGET inline Vec vbroadcast_here(const float* x) {
  Vec r;
  __asm__ volatile("vbroadcastss %1, %0" : "=v"(r) : "m"(*x));
  return r;
}

PAGODA_TARGET inline Vec vfma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
PAGODA_TARGET inline Vec vadd(Vec a, Vec b) { return _mm256_add_ps(a, b); }
PAGODA_TARGET inline Vec vmul(Vec a, Vec b) { return _mm256_mul_ps(a, b); }
PAGODA_TARGET inline Vec vdiv(Vec a, Vec b) { return _mm256_div_ps(a, b); }

PAGODA_TARGET inline float vsum(Vec a) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

PAGODA_TARGET inline void vsum4(Vec a, Vec b, Vec c, Vec d, float* out) {
  out[0] = vsum(a);
  out[1] = vsum(b);
  out[2] = vsum(c);
  out[3] = vsum(d);
}

PAGODA_TARGET inline Vec vmin(Vec a, Vec b) { return _mm256_min_ps(a, b); }
PAGODA_TARGET inline Vec vmax(Vec a, Vec b) { return _mm256_max_ps(a, b); }
// Round to the nearest integer (ties to even), as a float.
PAGODA_TARGET inline Vec vround(Vec a) {
  return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
// Lanes (0, 1), (2, 3), ... swapped (interleaved RoPE pairs).
PAGODA_TARGET inline Vec vswap_pairs(Vec a) { return _mm256_permute_ps(a, _MM_SHUFFLE(2, 3, 0, 1)); }
// a * 2^n for integral n in [-126, 127]: 2^n built in the exponent field.
PAGODA_TARGET inline Vec vldexp(Vec a, Vec n) {
  const __m256i bits =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(a, _mm256_castsi256_ps(bits));
}

}  // namespace pagoda::ops::avx2
