// Int8 kernels for AVX-512 VNNI: vpdpbusd multiplies unsigned activation
// bytes by signed weight bytes and adds groups of 4 into int32 lanes. The
// activations are stored signed and flipped to x + 128 in registers (xor
// 0x80); the tile subtracts 128 * row_sums[c] at the end.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "ops/cpu/quant_kernels.h"
#include "ops/packed.h"

#define PAGODA_QISA quant_avx512
#define PAGODA_QTARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")))

namespace pagoda::ops::quant_avx512 {

// 32 zmm registers: 4 x 4 keeps 16 accumulators + 4 x rows + a weight row
// + the flip constant; a lone row (decode) streams 8 weight rows.
constexpr int kRowTile = 4, kColTile = 4, kSingleRowCols = 8;

// Full-mask maskz forms: GCC 12's unmasked ones pass an undefined vector
// and trip -Wmaybe-uninitialized (as in vec_avx512.h).
constexpr __mmask16 kAll = 0xffff;

PAGODA_QTARGET inline int32_t hsum(__m512i v) {
  const __m256i h = _mm256_add_epi32(_mm512_maskz_extracti64x4_epi64(0xff, v, 0),
                                     _mm512_maskz_extracti64x4_epi64(0xff, v, 1));
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

template <int R, int C>
PAGODA_QTARGET inline void dot_tile(const int8_t* x, const int8_t* w, int64_t k,
                                    const int32_t* row_sums, int32_t (&out)[R][C]) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512i acc[R][C];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_si512();
  }
  int64_t i = 0;
  for (; i + 64 <= k; i += 64) {
    __m512i xv[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) xv[r] = _mm512_xor_si512(_mm512_loadu_si512(x + r * k + i), flip);
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) {
      const __m512i wv = _mm512_loadu_si512(w + c * k + i);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[r][c] = _mm512_dpbusd_epi32(acc[r][c], xv[r], wv);
      // Decode streams C weight rows at once: ask for the next tile's rows
      // now so the streams do not wait on the hardware prefetcher.
      if constexpr (R == 1) __builtin_prefetch(w + (C + c) * k + i, 0, 1);
    }
  }
  if (i < k) {  // tail: masked loads; zero weight bytes add nothing
    const __mmask64 mask = (~uint64_t{0}) >> (64 - (k - i));
    __m512i xv[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      xv[r] = _mm512_xor_si512(_mm512_maskz_loadu_epi8(mask, x + r * k + i), flip);
    }
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) {
      const __m512i wv = _mm512_maskz_loadu_epi8(mask, w + c * k + i);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[r][c] = _mm512_dpbusd_epi32(acc[r][c], xv[r], wv);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) out[r][c] = hsum(acc[r][c]) - 128 * row_sums[c];
  }
}

PAGODA_QTARGET inline float row_amax(const float* x, int64_t k) {
  __m512 m = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= k; i += 16)
    m = _mm512_maskz_max_ps(kAll, m, _mm512_abs_ps(_mm512_loadu_ps(x + i)));
  if (i < k) {
    const auto mask = static_cast<__mmask16>((1u << (k - i)) - 1);
    m = _mm512_maskz_max_ps(kAll, m, _mm512_abs_ps(_mm512_maskz_loadu_ps(mask, x + i)));
  }
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, m);
  float r = 0.0f;
  for (float v : lanes) r = v > r ? v : r;
  return r;
}

PAGODA_QTARGET inline void quantize_row(const float* x, int64_t k, float inv, int8_t* q) {
  const __m512 s = _mm512_set1_ps(inv);
  int64_t i = 0;
  for (; i + 16 <= k; i += 16) {
    const __m512i v = _mm512_maskz_cvtps_epi32(kAll, _mm512_mul_ps(_mm512_loadu_ps(x + i), s));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i), _mm512_maskz_cvtsepi32_epi8(kAll, v));
  }
  if (i < k) {
    const auto mask = static_cast<__mmask16>((1u << (k - i)) - 1);
    const __m512i v =
        _mm512_maskz_cvtps_epi32(kAll, _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, x + i), s));
    _mm512_mask_cvtsepi32_storeu_epi8(q + i, mask, v);
  }
}

// ---- Packed weights (ops/packed.h) ---------------------------------------
constexpr int kPanelCols = kPackedColsI8;                       // ops/packed.h
constexpr int kPanelVectors = kPanelCols / 16, kPanelRows = 6;  // 24 int32 accumulators

// dots[r][c] = exact x row r . weight column c of one panel, for R rows:
// per input quad, the panel's 4 vectors times each row's broadcast quad.
template <int R>
PAGODA_QTARGET inline void panel_dots(const int8_t* x, int64_t k, const int8_t* panel,
                                      int32_t (*dots)[kPanelCols]) {
  __m512i acc[R][kPanelVectors];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < kPanelVectors; ++v) acc[r][v] = _mm512_setzero_si512();
  }
  const int8_t* b = panel;
  for (int64_t i = 0; i < k; i += 4, b += 4 * kPanelCols) {
    __m512i w[kPanelVectors];
#pragma GCC unroll 4
    for (int v = 0; v < kPanelVectors; ++v) w[v] = _mm512_loadu_si512(b + 64 * v);
      // No software prefetch for decode's lone row: the hardware prefetchers
      // stream a panel alone. On Zen 4 asking for the lines 8 KiB ahead cost
      // 2-15 points against the read probe (micro-bench and engine A/B,
      // bench/every_cpu.md session 20); on Zen 5 every distance and hint,
      // none included, was within 2% (session 18).
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      uint32_t quad;
      std::memcpy(&quad, x + r * k + i, sizeof quad);
      const __m512i a = _mm512_set1_epi32(static_cast<int32_t>(quad ^ 0x80808080u));  // x + 128
#pragma GCC unroll 4
      for (int v = 0; v < kPanelVectors; ++v) acc[r][v] = _mm512_dpbusd_epi32(acc[r][v], a, w[v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < kPanelVectors; ++v) _mm512_storeu_si512(dots[r] + 16 * v, acc[r][v]);
  }
}

// panel_dots<rows> for a runtime rows in [1, R].
template <int R>
PAGODA_QTARGET inline void panel_dots_upto(int64_t rows, const int8_t* x, int64_t k,
                                           const int8_t* panel, int32_t (*dots)[kPanelCols]) {
  if (rows == R) return panel_dots<R>(x, k, panel, dots);
  if constexpr (R > 1) panel_dots_upto<R - 1>(rows, x, k, panel, dots);
}

PAGODA_QTARGET void linear_i8_packed(const int8_t* qx, const float* x_scales, int64_t m,
                                     const int8_t* w, const float* w_scales,
                                     const int32_t* row_sums, int64_t k, int64_t n, int64_t ldy,
                                     const float* bias, float* y, int64_t p0, int64_t p1) {
  int32_t dots[kPanelRows][kPanelCols];
  for (int64_t p = p0; p < p1; ++p) {
    const int8_t* panel = w + p * k * kPanelCols;
    const int64_t c0 = p * kPanelCols, cols = n - c0 < kPanelCols ? n - c0 : kPanelCols;
    for (int64_t r0 = 0; r0 < m; r0 += kPanelRows) {
      const int64_t rows = m - r0 < kPanelRows ? m - r0 : kPanelRows;
      panel_dots_upto<kPanelRows>(rows, qx + r0 * k, k, panel, dots);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
          y[(r0 + r) * ldy + c0 + c] =
              cpu::dequantize(dots[r][c] - 128 * row_sums[c0 + c], x_scales[r0 + r],
                              w_scales[c0 + c], bias ? bias + c0 + c : nullptr);
        }
      }
    }
  }
}

}  // namespace pagoda::ops::quant_avx512

#include "ops/cpu/quant_impl.h"

namespace pagoda::ops::cpu {
const QuantKernelTable* avx512_vnni_quant_kernels() {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512vnni") || !__builtin_cpu_supports("avx512bw")) return nullptr;
  static const QuantKernelTable table{"avx512-vnni", quant_avx512::quantize_rows,
                                      quant_avx512::linear_i8, quant_avx512::linear_i8_packed};
  return &table;
}
}  // namespace pagoda::ops::cpu
