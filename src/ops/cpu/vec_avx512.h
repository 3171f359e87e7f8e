// 16 x f32 AVX-512 vector helpers (F, BW, VL, DQ); tails use masked loads
// and stores, which never touch memory outside the mask.
#pragma once

#include <immintrin.h>

#include <cstdint>

#define PAGODA_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))

namespace pagoda::ops::avx512 {

constexpr int kLanes = 16;
// 32 zmm registers: a 4 x 4 tile keeps 16 accumulators + 4 x rows + 1 weight
// vector live; a lone row streams 8 weight rows.
constexpr int kRowTile = 4, kColTile = 4, kSingleRowCols = 8;

using Vec = __m512;

PAGODA_TARGET inline __mmask16 tail_mask(int n) { return static_cast<__mmask16>((1u << n) - 1); }

PAGODA_TARGET inline Vec vzero() { return _mm512_setzero_ps(); }
PAGODA_TARGET inline Vec vset1(float s) { return _mm512_set1_ps(s); }
PAGODA_TARGET inline Vec vload(const float* p) { return _mm512_loadu_ps(p); }

// bf16 -> f32 is exact: zero-extend to 32 bits and shift into the high half.
// (Full-mask maskz forms: see vsum.)
PAGODA_TARGET inline Vec widen_bf16(__m256i h) {
  constexpr __mmask16 kAll = 0xffff;
  return _mm512_castsi512_ps(
      _mm512_maskz_slli_epi32(kAll, _mm512_maskz_cvtepu16_epi32(kAll, h), 16));
}
PAGODA_TARGET inline Vec vload(const uint16_t* p) {
  return widen_bf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

PAGODA_TARGET inline Vec vload_tail(const float* p, int n) {
  return _mm512_maskz_loadu_ps(tail_mask(n), p);
}
PAGODA_TARGET inline Vec vload_tail(const uint16_t* p, int n) {
  return widen_bf16(_mm256_maskz_loadu_epi16(tail_mask(n), p));
}

// FP8 e4m3 bytes -> f32 times 2^-8, exactly, subnormals included: moved
// into an f16's bits (sign to bit 15, the 4 exponent and 3 mantissa bits
// below it, f16's top exponent bit 0) they are an f16 whose exponent bias
// (15) is 8 more than e4m3's (7), and vcvtph2ps widens f16 subnormals
// exactly to normal f32s (no slow denormal arithmetic). Callers fold the
// 2^8 into the block scale. Sign-extending the byte puts its sign at bit
// 15 after the shift; bit 14 (also the sign) is cleared.
PAGODA_TARGET inline Vec e4m3_bytes_to_vec(__m128i bytes) {
  const __m256i h = _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(bytes), 7),
                                     _mm256_set1_epi16(static_cast<short>(0xbfff)));
  return _mm512_maskz_cvtph_ps(0xffff, h);  // maskz: see vsum
}
PAGODA_TARGET inline Vec vload_e4m3(const uint8_t* p) {
  return e4m3_bytes_to_vec(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
PAGODA_TARGET inline Vec vload_e4m3_tail(const uint8_t* p, int n) {
  return e4m3_bytes_to_vec(_mm_maskz_loadu_epi8(tail_mask(n), p));
}

// FP4 e2m1 (ops.h F4E2M1): the 16 code values times one block's scale, a
// lane each, so that permuting it by code gives the dequantised weights
// (exact: e2m1 values times a power of two).
using E2m1Table = __m512;
PAGODA_TARGET inline E2m1Table e2m1_table(float scale) {
  const __m512 values = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f,
                                       -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f);
  return _mm512_mul_ps(values, _mm512_set1_ps(scale));
}
// kLanes weights from kLanes / 2 bytes, in column order (byte j: low nibble
// lane 2j, high nibble lane 2j + 1). Each byte zero-extended to a qword and
// or-ed with itself shifted by 28 puts its high nibble at the bottom of the
// upper dword; vpermps reads only the low 4 bits of each index.
PAGODA_TARGET inline Vec vload_e2m1(const uint8_t* p, E2m1Table t) {
  constexpr __mmask8 kAll8 = 0xff;
  const __m512i q =
      _mm512_maskz_cvtepu8_epi64(kAll8, _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  const __m512i idx = _mm512_or_si512(q, _mm512_maskz_slli_epi64(kAll8, q, 28));
  return _mm512_maskz_permutexvar_ps(0xffff, idx, t);
}

// One pair row of a packed bf16 panel (ops/packed.h) widened: the words
// hold kLanes columns' (even, odd) input pairs; the even inputs' weights are
// the words shifted left by 16, the odd ones the words with the low half
// cleared, both exact f32s (2 integer ops per 2 * kLanes weights).
PAGODA_TARGET inline void vload_bf16_pairs(const uint16_t* p, Vec& even, Vec& odd) {
  const __m512i words = _mm512_loadu_si512(p);
  even = _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, words, 16));  // maskz: see vsum
  odd = _mm512_castsi512_ps(_mm512_maskz_and_epi32(
      0xffff, words, _mm512_set1_epi32(static_cast<int32_t>(0xffff0000u))));
}
// x[0] in every lane, loaded where it is used: as an asm statement, so the
// compiler cannot hoist a tile's broadcasts and keep them live.
PAGODA_TARGET inline Vec vbroadcast_here(const float* x) {
  Vec r;
  __asm__ volatile("vbroadcastss %1, %0" : "=v"(r) : "m"(*x));
  return r;
}

PAGODA_TARGET inline void vstore(float* p, Vec a) { _mm512_storeu_ps(p, a); }

// Values bf16 holds exactly (e.g. e4m3 times a power of two) -> their bf16
// bits, the high halves of the f32s: no rounding, so no rounding error.
PAGODA_TARGET inline __m512i bf16_halves(Vec a) {
  return _mm512_maskz_srli_epi32(0xffff, _mm512_castps_si512(a), 16);
}
PAGODA_TARGET inline void vstore_bf16_exact(uint16_t* p, Vec a) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                      _mm512_maskz_cvtepi32_epi16(0xffff, bf16_halves(a)));
}
PAGODA_TARGET inline void vstore_bf16_exact_tail(uint16_t* p, Vec a, int n) {
  _mm512_mask_cvtepi32_storeu_epi16(p, tail_mask(n), bf16_halves(a));
}
PAGODA_TARGET inline void vstore_tail(float* p, Vec a, int n) {
  _mm512_mask_storeu_ps(p, tail_mask(n), a);
}

PAGODA_TARGET inline Vec vfma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
PAGODA_TARGET inline Vec vadd(Vec a, Vec b) { return _mm512_add_ps(a, b); }
PAGODA_TARGET inline Vec vmul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
PAGODA_TARGET inline Vec vdiv(Vec a, Vec b) { return _mm512_div_ps(a, b); }

// Full-mask maskz forms: GCC 12's unmasked ones pass _mm512_undefined_ps()
// and trip -Wmaybe-uninitialized.
PAGODA_TARGET inline Vec vmin(Vec a, Vec b) { return _mm512_maskz_min_ps(0xffff, a, b); }
PAGODA_TARGET inline Vec vmax(Vec a, Vec b) { return _mm512_maskz_max_ps(0xffff, a, b); }
// Round to the nearest integer (ties to even), as a float.
PAGODA_TARGET inline Vec vround(Vec a) {
  return _mm512_maskz_roundscale_ps(0xffff, a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
// Lanes (0, 1), (2, 3), ... swapped: the partner of each element in an
// interleaved (GPT-J) RoPE pair.
PAGODA_TARGET inline Vec vswap_pairs(Vec a) {
  return _mm512_maskz_permute_ps(0xffff, a, _MM_SHUFFLE(2, 3, 0, 1));
}
// a * 2^n for integral n in [-126, 127].
PAGODA_TARGET inline Vec vldexp(Vec a, Vec n) { return _mm512_maskz_scalef_ps(0xffff, a, n); }

// Horizontal sums of four accumulators at once, each by the one tree vsum
// uses (lanes i and i+8, then i and i+4 of those, then j and j^2, then j
// and j^1): sharing the shuffles between four outputs costs ~3
// instructions an output instead of 8, and an output's sum does not
// depend on which accumulators it was grouped with.
// Zero-masked shuffles with a full mask: GCC 12's unmasked forms (and the
// 512 -> 256 casts) pass _mm512_undefined_ps() and trip -Wuninitialized.
PAGODA_TARGET inline __m128 hsum4(__m512 a, __m512 b, __m512 c, __m512 d) {
  constexpr __mmask16 kAll = 0xffff;
  // Step 1: [a.lo + a.hi, b.lo + b.hi] (256-bit halves); same for c, d.
  const __m512 ab = _mm512_add_ps(_mm512_maskz_shuffle_f32x4(kAll, a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm512_maskz_shuffle_f32x4(kAll, a, b, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 cd = _mm512_add_ps(_mm512_maskz_shuffle_f32x4(kAll, c, d, _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm512_maskz_shuffle_f32x4(kAll, c, d, _MM_SHUFFLE(3, 2, 3, 2)));
  // Step 2: 128-bit block q holds the four partial sums of output q.
  __m512 s = _mm512_add_ps(_mm512_maskz_shuffle_f32x4(kAll, ab, cd, _MM_SHUFFLE(2, 0, 2, 0)),
                           _mm512_maskz_shuffle_f32x4(kAll, ab, cd, _MM_SHUFFLE(3, 1, 3, 1)));
  // Steps 3 and 4 within each block.
  s = _mm512_add_ps(s, _mm512_maskz_permute_ps(kAll, s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm512_add_ps(s, _mm512_maskz_permute_ps(kAll, s, _MM_SHUFFLE(2, 3, 0, 1)));
  // Lane 0 of each block.
  const __m512i lanes = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0);
  return _mm512_maskz_extractf32x4_ps(0xf, _mm512_maskz_permutexvar_ps(kAll, lanes, s), 0);
}

PAGODA_TARGET inline float vsum(Vec a) {
  constexpr __mmask16 kAll = 0xffff;
  a = _mm512_add_ps(a, _mm512_maskz_shuffle_f32x4(kAll, a, a, _MM_SHUFFLE(1, 0, 3, 2)));
  a = _mm512_add_ps(a, _mm512_maskz_shuffle_f32x4(kAll, a, a, _MM_SHUFFLE(2, 3, 0, 1)));
  a = _mm512_add_ps(a, _mm512_maskz_permute_ps(kAll, a, _MM_SHUFFLE(1, 0, 3, 2)));
  a = _mm512_add_ps(a, _mm512_maskz_permute_ps(kAll, a, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm512_cvtss_f32(a);
}
PAGODA_TARGET inline void vsum4(Vec a, Vec b, Vec c, Vec d, float* out) {
  _mm_storeu_ps(out, hsum4(a, b, c, d));
}

}  // namespace pagoda::ops::avx512
