// Int8 kernels for AVX2, and for AVX2 + AVX-VNNI (Isa::Avx2Vnni), row-major
// and packed (ops/packed.h). vpmaddubsw multiplies unsigned by signed bytes
// and saturates pair sums to int16, so it gets |w| and sign(w) * x: each
// pair sum is at most 2 * 127 * 127 < 32767 and the result stays exact.
// AVX-VNNI's vpdpbusd takes x + 128 and w, as the AVX-512 VNNI kernels. All
// compute exact integer dots, so every variant gives the same bits.
#include <cpuid.h>
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "ops/cpu/quant_kernels.h"
#include "ops/packed.h"

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

// ---- AVX-VNNI (256-bit vpdpbusd): row-major tiles ------------------------
// As quant_avx512.cpp: activations flipped to x + 128 (unsigned) in
// registers, 128 * row_sums[c] subtracted at the end; the quantization
// helpers are the AVX2 ones.
#undef PAGODA_QISA
#undef PAGODA_QTARGET
#define PAGODA_QISA quant_avxvnni
#define PAGODA_QTARGET __attribute__((target("avx2,fma,avxvnni")))

namespace pagoda::ops::quant_avxvnni {

using quant_avx2::hsum;
using quant_avx2::quantize_row;
using quant_avx2::row_amax;

// 16 ymm registers: 2 x 4 accumulators + 2 x rows + a weight row + the flip.
constexpr int kRowTile = 2, kColTile = 4, kSingleRowCols = 8;

template <int R, int C>
PAGODA_QTARGET inline void dot_step(const int8_t* x, int64_t x_stride, const int8_t* w,
                                    int64_t w_stride, __m256i (&acc)[R][C]) {
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  __m256i xv[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    xv[r] = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + r * x_stride)),
                             flip);
  }
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) {
    const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + c * w_stride));
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[r][c] = _mm256_dpbusd_avx_epi32(acc[r][c], xv[r], wv);
  }
}

template <int R, int C>
PAGODA_QTARGET inline void dot_tile(const int8_t* x, const int8_t* w, int64_t k,
                                    const int32_t* row_sums, int32_t (&out)[R][C]) {
  __m256i acc[R][C];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_si256();
  }
  int64_t i = 0;
  for (; i + 32 <= k; i += 32) {
    dot_step<R, C>(x + i, k, w + i, k, acc);
    // Decode streams C weight rows at once: ask for the next tile's rows.
    if constexpr (R == 1) {
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) __builtin_prefetch(w + (C + c) * k + i, 0, 1);
    }
  }
  if (i < k) {  // tail: zero-padded copies; zero weight bytes add nothing
    const auto t = static_cast<size_t>(k - i);
    alignas(32) int8_t xt[R][32] = {}, wt[C][32] = {};
    for (int r = 0; r < R; ++r) std::memcpy(xt[r], x + r * k + i, t);
    for (int c = 0; c < C; ++c) std::memcpy(wt[c], w + c * k + i, t);
    dot_step<R, C>(&xt[0][0], 32, &wt[0][0], 32, acc);
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) out[r][c] = hsum(acc[r][c]) - 128 * row_sums[c];
  }
}

}  // namespace pagoda::ops::quant_avxvnni

#include "ops/cpu/quant_impl.h"

// ---- Packed weights (ops/packed.h), both instruction sets ----------------
// A panel's quad row (4 inputs x 64 columns, 256 bytes) is 8 ymm of 8
// columns' quads; a tile takes R rows x V of those vectors, broadcasting
// each row's quad of activations. The two ways of an exact quad dot:
namespace pagoda::ops::quant_avx2_packed {

#define PAGODA_PACKED_AVX2 __attribute__((target("avx2,fma")))
#define PAGODA_PACKED_VNNI __attribute__((target("avx2,fma,avxvnni")))

// Each way is a struct of static functions with its target attribute; the
// templates below have none, and the targeted entry points are `flatten`,
// so that everything inlines into them (as roofline_probes.cpp does).
// Vectors go by reference: by value in untargeted code changes the ABI.

// vpmaddubsw on |w| and sign(w) * x (exact, as quant_avx2's dot32), pairs
// summed to int32 by vpmaddwd; |w| is taken once per weight vector.
struct MaddubsDot {
  static constexpr int32_t kOffset = 0;  // x is used as stored
  // 4 x 2 accumulators + 2 x (w, |w|) + a broadcast row, a product, ones.
  static constexpr int kRows = 4;
  struct Weights {
    __m256i w, abs_w;
  };
  static PAGODA_PACKED_AVX2 void zero(__m256i& acc) { acc = _mm256_setzero_si256(); }
  static PAGODA_PACKED_AVX2 void store(int32_t* out, const __m256i& acc) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), acc);
  }
  static PAGODA_PACKED_AVX2 void weights(const int8_t* p, Weights& w) {
    w.w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    w.abs_w = _mm256_abs_epi8(w.w);
  }
  static PAGODA_PACKED_AVX2 void activations(uint32_t quad, __m256i& x) {
    x = _mm256_set1_epi32(static_cast<int32_t>(quad));
  }
  static PAGODA_PACKED_AVX2 void step(__m256i& acc, const __m256i& x, const Weights& w) {
    const __m256i p16 = _mm256_maddubs_epi16(w.abs_w, _mm256_sign_epi8(x, w.w));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
  }
};

// vpdpbusd on x + 128 (unsigned) and w; 128 * row_sums comes off at the end.
struct VnniDot {
  static constexpr int32_t kOffset = 128;
  // 6 x 2 accumulators + 2 weight vectors + a broadcast row.
  static constexpr int kRows = 6;
  struct Weights {
    __m256i w;
  };
  static PAGODA_PACKED_VNNI void zero(__m256i& acc) { acc = _mm256_setzero_si256(); }
  static PAGODA_PACKED_VNNI void store(int32_t* out, const __m256i& acc) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), acc);
  }
  static PAGODA_PACKED_VNNI void weights(const int8_t* p, Weights& w) {
    w.w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  }
  static PAGODA_PACKED_VNNI void activations(uint32_t quad, __m256i& x) {
    x = _mm256_set1_epi32(static_cast<int32_t>(quad ^ 0x80808080u));
  }
  static PAGODA_PACKED_VNNI void step(__m256i& acc, const __m256i& x, const Weights& w) {
    acc = _mm256_dpbusd_avx_epi32(acc, x, w.w);
  }
};

constexpr int kPanelCols = kPackedColsI8;  // ops/packed.h
constexpr int kPanelVectors = kPanelCols / 8;
constexpr int64_t kQuadStride = 4 * kPanelCols;  // bytes per quad row of a panel

// dots[r][8 * (v0 + v) + j] = exact (x + offset) row r . panel column, for
// R rows and vectors [v0, v0 + V), over all k.
template <class Dot, int R, int V>
inline void panel_dots(const int8_t* x, int64_t k, const int8_t* panel, int v0,
                       int32_t (*dots)[kPanelCols]) {
  __m256i acc[R][V];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) Dot::zero(acc[r][v]);
  }
  const int8_t* b = panel + 32 * v0;
  for (int64_t i = 0; i < k; i += 4, b += kQuadStride) {
    // No software prefetch for decode's lone row (as quant_avx512.cpp's
    // panels): on Zen 4 the lines asked for 8 KiB ahead left the decode
    // lower against the read probe (bench/every_cpu.md, session 20).
    typename Dot::Weights w[V];
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) Dot::weights(b + 32 * v, w[v]);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      uint32_t quad;
      std::memcpy(&quad, x + r * k + i, sizeof quad);
      __m256i a;
      Dot::activations(quad, a);
#pragma GCC unroll 8
      for (int v = 0; v < V; ++v) Dot::step(acc[r][v], a, w[v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) Dot::store(dots[r] + 8 * (v0 + v), acc[r][v]);
  }
}

// The rows of one panel: a lone row in one pass over all 8 vectors; more
// rows in R-row tiles over V vectors at a time (the runtime row count of
// the last tile picked by recursion).
template <class Dot, int R, int V>
inline void panel_rows(int64_t rows, const int8_t* x, int64_t k, const int8_t* panel,
                       int32_t (*dots)[kPanelCols]) {
  if (rows == R) {
    for (int v0 = 0; v0 < kPanelVectors; v0 += V) panel_dots<Dot, R, V>(x, k, panel, v0, dots);
    return;
  }
  if constexpr (R > 2) {
    panel_rows<Dot, R - 1, V>(rows, x, k, panel, dots);
  } else {
    panel_dots<Dot, 1, kPanelVectors>(x, k, panel, 0, dots);
  }
}

// Vectors per pass of a tile of Dot::kRows rows (at most kMaxPanelRows).
constexpr int kPanelTileVectors = 2, kMaxPanelRows = 6;

template <class Dot>
inline void linear_i8_packed(const int8_t* qx, const float* x_scales, int64_t m, const int8_t* w,
                             const float* w_scales, const int32_t* row_sums, int64_t k, int64_t n,
                             int64_t ldy, const float* bias, float* y, int64_t p0, int64_t p1) {
  constexpr int kPanelRows = Dot::kRows;
  static_assert(kPanelRows <= kMaxPanelRows);
  alignas(32) int32_t dots[kMaxPanelRows][kPanelCols];
  for (int64_t p = p0; p < p1; ++p) {
    const int8_t* panel = w + p * k * kPanelCols;
    const int64_t c0 = p * kPanelCols, cols = n - c0 < kPanelCols ? n - c0 : kPanelCols;
    for (int64_t r0 = 0; r0 < m; r0 += kPanelRows) {
      const int64_t rows = m - r0 < kPanelRows ? m - r0 : kPanelRows;
      panel_rows<Dot, kPanelRows, kPanelTileVectors>(rows, qx + r0 * k, k, panel, dots);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
          y[(r0 + r) * ldy + c0 + c] =
              cpu::dequantize(dots[r][c] - Dot::kOffset * row_sums[c0 + c], x_scales[r0 + r],
                              w_scales[c0 + c], bias ? bias + c0 + c : nullptr);
        }
      }
    }
  }
}

PAGODA_PACKED_AVX2 __attribute__((flatten)) void linear_i8_packed_avx2(
    const int8_t* qx, const float* x_scales, int64_t m, const int8_t* w, const float* w_scales,
    const int32_t* row_sums, int64_t k, int64_t n, int64_t ldy, const float* bias, float* y,
    int64_t p0, int64_t p1) {
  linear_i8_packed<MaddubsDot>(qx, x_scales, m, w, w_scales, row_sums, k, n, ldy, bias, y, p0, p1);
}

PAGODA_PACKED_VNNI __attribute__((flatten)) void linear_i8_packed_vnni(
    const int8_t* qx, const float* x_scales, int64_t m, const int8_t* w, const float* w_scales,
    const int32_t* row_sums, int64_t k, int64_t n, int64_t ldy, const float* bias, float* y,
    int64_t p0, int64_t p1) {
  linear_i8_packed<VnniDot>(qx, x_scales, m, w, w_scales, row_sums, k, n, ldy, bias, y, p0, p1);
}

}  // namespace pagoda::ops::quant_avx2_packed

namespace pagoda::ops::cpu {
const QuantKernelTable& avx2_quant_kernels() {
  static const QuantKernelTable table{"avx2", quant_avx2::quantize_rows, quant_avx2::linear_i8,
                                      quant_avx2_packed::linear_i8_packed_avx2};
  return table;
}

const QuantKernelTable* avx_vnni_quant_kernels() {
  // Asked once: active_quant_kernels() asks on every int8 linear (several
  // times a layer), and CPUID traps to the hypervisor in a VM (tens of
  // microseconds each: 60% of a --isa avx2vnni decode step here).
  static const QuantKernelTable* const kernels = []() -> const QuantKernelTable* {
    // CPUID leaf 7 subleaf 1, EAX bit 4 (clang 14's __builtin_cpu_supports
    // has no "avxvnni"); AVX state saving is checked with avx2.
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) == 0 ||
        (eax & (1u << 4)) == 0) {
      return nullptr;
    }
    static const QuantKernelTable table{"avx-vnni", quant_avxvnni::quantize_rows,
                                        quant_avxvnni::linear_i8,
                                        quant_avx2_packed::linear_i8_packed_vnni};
    return &table;
  }();
  return kernels;
}
}  // namespace pagoda::ops::cpu
