// The neonbf16 kernel table: the neon table, with bf16-weight linears done
// as bf16 x bf16 -> f32 dot products (bfdot, Armv8.6 BF16; dispatch checks
// HWCAP2_BF16) instead of widening the weights to f32: the analogue of
// avx512bf16's vdpbf16ps, with the same tile shape (both ISAs have 32
// vector registers). Activations are rounded to bf16 once per call
// (bfcvtn: round-to-nearest-even); weights are read in place, row-major.
//
// Determinism: every output element is one accumulator chain over k in
// steps of 4 bf16 pairs, the same zero-padded tail, the same horizontal sum
// and then the bias, whichever tile (decode R = 1 or a prefill row tile)
// and thread computes it; so rows do not depend on the batch.
//
// bfmmla (a 2 x 2 block of outputs per instruction) would do twice the
// work of bfdot per instruction for prefill, but a lone decode row would
// then sum differently from the same row in a batch (or waste half of
// each instruction): kept for later, with hardware to measure it on.
#include <arm_neon.h>

#include <cstdint>
#include <cstring>

#include "ops/cpu/kernels.h"

#define PAGODA_BF16_TARGET __attribute__((target("arch=armv8.2-a+bf16")))

namespace pagoda::ops::neon_bf16 {
namespace {

// 4 x 6 = 24 accumulators + 4 activation rows + 1 weight vector of the 32
// q registers, as avx512bf16; a lone row (decode) streams 8 weight rows.
constexpr int kRowTile = 4, kColTile = 6, kSingleRowCols = 8;
constexpr int kStep = 8;  // bf16 elements per register
// Weights of one column block (~this many bytes) stay in L2 while every
// row tile passes over them, so they come from memory once per call.
constexpr int64_t kColumnBlockBytes = int64_t{256} << 10;

PAGODA_BF16_TARGET inline bfloat16x8_t load_bh(const uint16_t* p) {
  return vreinterpretq_bf16_u16(vld1q_u16(p));
}
// The first n (< kStep) elements, +0 after (exact zeros in the chain).
PAGODA_BF16_TARGET inline bfloat16x8_t load_bh_tail(const uint16_t* p, int n) {
  uint16_t buf[kStep] = {};
  std::memcpy(buf, p, static_cast<size_t>(n) * sizeof(uint16_t));
  return load_bh(buf);
}

// y[r * ldy + c] for R activation rows x (bf16, row stride k) and C weight
// rows from w (row stride k): the register-blocked micro kernel.
template <int R, int C>
PAGODA_BF16_TARGET inline void dot_tile(const uint16_t* x, const uint16_t* w, int64_t k,
                                        const float* bias, float* y, int64_t ldy) {
  float32x4_t acc[R][C];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) acc[r][c] = vdupq_n_f32(0.0f);
  }
  int64_t i = 0;
  for (; i + kStep <= k; i += kStep) {
    bfloat16x8_t xv[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) xv[r] = load_bh(x + r * k + i);
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) {
      const bfloat16x8_t wv = load_bh(w + c * k + i);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[r][c] = vbfdotq_f32(acc[r][c], xv[r], wv);
      // Decode is bound by streaming weights: ask for the next tile's rows
      // (C rows on) one tile ahead, a 64-byte line every 4 steps.
      if constexpr (R == 1) {
        if (i % 32 == 0) __builtin_prefetch(w + (C + c) * k + i, 0, 1);
      }
    }
  }
  if (i < k) {
    const int t = static_cast<int>(k - i);
    bfloat16x8_t xv[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) xv[r] = load_bh_tail(x + r * k + i, t);
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) {
      const bfloat16x8_t wv = load_bh_tail(w + c * k + i, t);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[r][c] = vbfdotq_f32(acc[r][c], xv[r], wv);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) {
      float s = vaddvq_f32(acc[r][c]);
      if (bias) s += bias[c];
      y[r * ldy + c] = s;
    }
  }
}

// Columns [c0, c1) for R consecutive rows: C weight rows per tile, then one
// at a time for the remainder.
template <int R, int C>
PAGODA_BF16_TARGET inline void dot_rows(const uint16_t* x, const uint16_t* w, int64_t k,
                                        int64_t ldy, const float* bias, float* y, int64_t c0,
                                        int64_t c1) {
  int64_t c = c0;
  for (; c + C <= c1; c += C)
    dot_tile<R, C>(x, w + c * k, k, bias ? bias + c : nullptr, y + c, ldy);
  for (; c < c1; ++c) dot_tile<R, 1>(x, w + c * k, k, bias ? bias + c : nullptr, y + c, ldy);
}

PAGODA_BF16_TARGET void linear_bf16_dot(const uint16_t* x, int64_t m, const uint16_t* w, int64_t k,
                                        int64_t n, const float* bias, float* y, int64_t n0,
                                        int64_t n1) {
  const int64_t row_bytes = k * 2;
  int64_t block = kColumnBlockBytes / (row_bytes > 0 ? row_bytes : 1);
  block = block < 2 * kColTile ? 2 * kColTile : block - block % kColTile;
  for (int64_t c0 = n0; c0 < n1; c0 += block) {
    const int64_t c1 = c0 + block < n1 ? c0 + block : n1;
    int64_t r = 0;
    for (; r + kRowTile <= m; r += kRowTile) {
      dot_rows<kRowTile, kColTile>(x + r * k, w, k, n, bias, y + r * n, c0, c1);
    }
    for (; r < m; ++r) dot_rows<1, kSingleRowCols>(x + r * k, w, k, n, bias, y + r * n, c0, c1);
  }
}

// out[i] = bf16(x[i]), round-to-nearest-even (bfcvtn, FPCR's default mode).
PAGODA_BF16_TARGET void to_bf16(const float* x, int64_t count, uint16_t* out) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const bfloat16x8_t lo = vcvtq_low_bf16_f32(vld1q_f32(x + i));
    const bfloat16x8_t h = vcvtq_high_bf16_f32(lo, vld1q_f32(x + i + 4));
    vst1q_u16(out + i, vreinterpretq_u16_bf16(h));
  }
  if (i < count) {
    const auto t = static_cast<size_t>(count - i);
    float in[8] = {};
    uint16_t buf[8];
    std::memcpy(in, x + i, t * sizeof(float));
    const bfloat16x8_t h =
        vcvtq_high_bf16_f32(vcvtq_low_bf16_f32(vld1q_f32(in)), vld1q_f32(in + 4));
    vst1q_u16(buf, vreinterpretq_u16_bf16(h));
    std::memcpy(out + i, buf, t * sizeof(uint16_t));
  }
}

}  // namespace
}  // namespace pagoda::ops::neon_bf16

namespace pagoda::ops::cpu {

const KernelTable& neon_bf16_kernels() {
  static const KernelTable table = [] {
    KernelTable t = neon_kernels();
    t.bf16_rows = neon_bf16::to_bf16;
    t.linear_bf16_dot = neon_bf16::linear_bf16_dot;
    return t;
  }();
  return table;
}

}  // namespace pagoda::ops::cpu
