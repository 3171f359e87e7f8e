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
