// Int8 kernels for AVX2. vpmaddubsw multiplies unsigned by signed bytes and
// saturates pair sums to int16, so it gets |w| and sign(w) * x: each pair
// sum is at most 2 * 127 * 127 < 32767 and the result stays exact.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "ops/cpu/quant_kernels.h"

#define PAGODA_QISA quant_avx2
#define PAGODA_QTARGET __attribute__((target("avx2,fma")))

namespace pagoda::ops::quant_avx2 {

// 16 ymm registers: 2 x 4 keeps 8 accumulators, 2 x rows, a weight row,
// its absolute value, a product and the ones.
constexpr int kRowTile = 2, kColTile = 4, kSingleRowCols = 8;

PAGODA_QTARGET inline int32_t hsum(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

PAGODA_QTARGET inline __m256i dot32(__m256i x, __m256i w) {
  const __m256i p16 = _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(x, w));
  return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

// acc[r][c] += the dot products of 32 bytes of R x rows and C w rows.
template <int R, int C>
PAGODA_QTARGET inline void dot_step(const int8_t* x, int64_t x_stride, const int8_t* w,
                                    int64_t w_stride, __m256i (&acc)[R][C]) {
  __m256i xv[R];
  for (int r = 0; r < R; ++r) {
    xv[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + r * x_stride));
  }
  for (int c = 0; c < C; ++c) {
    const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + c * w_stride));
    for (int r = 0; r < R; ++r) acc[r][c] = _mm256_add_epi32(acc[r][c], dot32(xv[r], wv));
  }
}

template <int R, int C>
PAGODA_QTARGET inline void dot_tile(const int8_t* x, const int8_t* w, int64_t k,
                                    const int32_t* /*row_sums*/, int32_t (&out)[R][C]) {
  __m256i acc[R][C];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_si256();
  }
  int64_t i = 0;
  for (; i + 32 <= k; i += 32) dot_step<R, C>(x + i, k, w + i, k, acc);
  if (i < k) {  // tail: zero-padded copies (AVX2 has no masked byte loads)
    const auto t = static_cast<size_t>(k - i);
    alignas(32) int8_t xt[R][32] = {}, wt[C][32] = {};
    for (int r = 0; r < R; ++r) std::memcpy(xt[r], x + r * k + i, t);
    for (int c = 0; c < C; ++c) std::memcpy(wt[c], w + c * k + i, t);
    dot_step<R, C>(&xt[0][0], 32, &wt[0][0], 32, acc);
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) out[r][c] = hsum(acc[r][c]);
  }
}

PAGODA_QTARGET inline float row_amax(const float* x, int64_t k) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= k; i += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, m);
  float r = 0.0f;
  for (float v : lanes) r = v > r ? v : r;
  for (; i < k; ++i) r = std::fabs(x[i]) > r ? std::fabs(x[i]) : r;
  return r;
}

PAGODA_QTARGET inline void quantize_row(const float* x, int64_t k, float inv, int8_t* q) {
  const __m256 s = _mm256_set1_ps(inv);
  int64_t i = 0;
  for (; i + 8 <= k; i += 8) {
    const __m256i v = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i), s));
    const __m128i h = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(q + i), _mm_packs_epi16(h, h));
  }
  for (; i < k; ++i) q[i] = static_cast<int8_t>(std::nearbyint(x[i] * inv));
}

}  // namespace pagoda::ops::quant_avx2

#include "ops/cpu/quant_impl.h"

namespace pagoda::ops::cpu {
const QuantKernelTable& avx2_quant_kernels() {
  static const QuantKernelTable table{"avx2", quant_avx2::quantize_rows, quant_avx2::linear_i8};
  return table;
}
}  // namespace pagoda::ops::cpu
