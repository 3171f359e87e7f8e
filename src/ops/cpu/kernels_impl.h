// The kernel bodies, written once against a small vector interface (Vec,
// vload, vfma, vsum, ...) and compiled once per ISA: kernels_<isa>.cpp
// includes its vec_<isa>.h, defines PAGODA_ISA and includes this file, so
// every function below lands in namespace pagoda::ops::<isa> with that ISA's
// target attribute (PAGODA_TARGET).
//
// Determinism: each linear output is one vector accumulator chain over k,
// the same masked tail, then vsum and the bias, whichever tile computes it;
// so outputs do not depend on batch size, row position or thread split.
#ifndef PAGODA_ISA
#error "define PAGODA_ISA before including kernels_impl.h"
#endif

namespace pagoda::ops::PAGODA_ISA {
namespace {

using cpu::AttentionQuery;

#ifndef PAGODA_PREFETCH_NEXT_TILE  // build-time switch for A/B benchmarks
#define PAGODA_PREFETCH_NEXT_TILE 1
#endif
constexpr bool kPrefetchNextTile = PAGODA_PREFETCH_NEXT_TILE;

// y[r * ldy + c] for R rows of x (row stride k) and C weight rows starting
// at w (row stride k): the register-blocked micro kernel of linear.
template <int R, int C, typename W>
PAGODA_TARGET inline void linear_tile(const float* x, const W* w, int64_t k, const float* bias,
                                      float* y, int64_t ldy) {
  Vec acc[R][C];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) acc[r][c] = vzero();
  }
  int64_t i = 0;
  for (; i + kLanes <= k; i += kLanes) {
    Vec xv[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) xv[r] = vload(x + r * k + i);
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) {
      const Vec wv = vload(w + c * k + i);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[r][c] = vfma(xv[r], wv, acc[r][c]);
      // Decode (one activation row) is bound by streaming weights: ask for
      // the next tile's rows (C rows further on, one tile ahead) now, so
      // C concurrent row streams do not wait on the hardware prefetcher.
      if constexpr (R == 1 && kPrefetchNextTile) {
        if (i % (64 / sizeof(W)) == 0) __builtin_prefetch(w + (C + c) * k + i, 0, 0);
      }
    }
  }
  if (i < k) {  // tail: zero-padded lanes add exact zeros
    const int t = static_cast<int>(k - i);
    Vec xv[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) xv[r] = vload_tail(x + r * k + i, t);
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) {
      const Vec wv = vload_tail(w + c * k + i, t);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[r][c] = vfma(xv[r], wv, acc[r][c]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) {
      float s = vsum(acc[r][c]);
      if (bias) s += bias[c];
      y[r * ldy + c] = s;
    }
  }
}

// Columns [c0, c1) for R consecutive rows: C weight rows per tile, then one
// at a time for the remainder.
template <int R, int C, typename W>
PAGODA_TARGET inline void linear_rows(const float* x, const W* w, int64_t k, int64_t n,
                                      const float* bias, float* y, int64_t c0, int64_t c1) {
  int64_t c = c0;
  for (; c + C <= c1; c += C) {
    linear_tile<R, C>(x, w + c * k, k, bias ? bias + c : nullptr, y + c, n);
  }
  for (; c < c1; ++c) linear_tile<R, 1>(x, w + c * k, k, bias ? bias + c : nullptr, y + c, n);
}

template <typename W>
PAGODA_TARGET void linear_columns(const float* x, int64_t m, const W* w, int64_t k, int64_t n,
                                  const float* bias, float* y, int64_t n0, int64_t n1) {
  // Column blocks of ~256 KiB of weights stay in L2 while every row tile
  // passes over them, so weights come from memory once per call.
  const int64_t row_bytes = k * static_cast<int64_t>(sizeof(W));
  int64_t block = (int64_t{256} << 10) / (row_bytes > 0 ? row_bytes : 1);
  block = block < 16 ? 16 : block - block % 16;
  for (int64_t c0 = n0; c0 < n1; c0 += block) {
    const int64_t c1 = c0 + block < n1 ? c0 + block : n1;
    int64_t r = 0;
    for (; r + kRowTile <= m; r += kRowTile) {
      linear_rows<kRowTile, kColTile>(x + r * k, w, k, n, bias, y + r * n, c0, c1);
    }
    for (; r < m; ++r) linear_rows<1, kSingleRowCols>(x + r * k, w, k, n, bias, y + r * n, c0, c1);
  }
}

PAGODA_TARGET void linear_f32(const float* x, int64_t m, const float* w, int64_t k, int64_t n,
                              const float* bias, float* y, int64_t n0, int64_t n1) {
  linear_columns(x, m, w, k, n, bias, y, n0, n1);
}

PAGODA_TARGET void linear_bf16(const float* x, int64_t m, const uint16_t* w, int64_t k, int64_t n,
                               const float* bias, float* y, int64_t n0, int64_t n1) {
  linear_columns(x, m, w, k, n, bias, y, n0, n1);
}

PAGODA_TARGET inline float dot(const float* a, const float* b, int64_t n) {
  Vec s0 = vzero(), s1 = vzero();
  int64_t i = 0;
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    s0 = vfma(vload(a + i), vload(b + i), s0);
    s1 = vfma(vload(a + i + kLanes), vload(b + i + kLanes), s1);
  }
  for (; i + kLanes <= n; i += kLanes) s0 = vfma(vload(a + i), vload(b + i), s0);
  if (i < n) {
    const int t = static_cast<int>(n - i);
    s1 = vfma(vload_tail(a + i, t), vload_tail(b + i, t), s1);
  }
  return vsum(vadd(s0, s1));
}

// y[i] = x[i] * s * w[i]
PAGODA_TARGET inline void scale_mul(const float* x, float s, const float* w, float* y, int64_t n) {
  const Vec sv = vset1(s);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) vstore(y + i, vmul(vmul(vload(x + i), sv), vload(w + i)));
  if (i < n) {
    const int t = static_cast<int>(n - i);
    vstore_tail(y + i, vmul(vmul(vload_tail(x + i, t), sv), vload_tail(w + i, t)), t);
  }
}

PAGODA_TARGET inline void rms_norm_row(const float* x, const float* weight, int64_t n, float eps,
                                       float* y) {
  const float mean_sq = dot(x, x, n) / static_cast<float>(n);
  scale_mul(x, 1.0f / __builtin_sqrtf(mean_sq + eps), weight, y, n);
}

PAGODA_TARGET void rms_norm_rows(const float* x, const float* weight, int64_t n, float eps,
                                 float* y, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) rms_norm_row(x + r * n, weight, n, eps, y + r * n);
}

PAGODA_TARGET void add_rms_norm_rows(float* residual, const float* x, const float* weight,
                                     int64_t n, float eps, float* y, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    float* res = residual + r * n;
    const float* xr = x + r * n;
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) vstore(res + i, vadd(vload(res + i), vload(xr + i)));
    if (i < n) {
      const int t = static_cast<int>(n - i);
      vstore_tail(res + i, vadd(vload_tail(res + i, t), vload_tail(xr + i, t)), t);
    }
    rms_norm_row(res, weight, n, eps, y + r * n);  // the row is still in L1
  }
}

// y[i] = x[i] * s (y may alias x)
PAGODA_TARGET inline void scale(const float* x, float s, float* y, int64_t n) {
  const Vec sv = vset1(s);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) vstore(y + i, vmul(vload(x + i), sv));
  if (i < n) {
    const int t = static_cast<int>(n - i);
    vstore_tail(y + i, vmul(vload_tail(x + i, t), sv), t);
  }
}

// acc[i] += p * v[i]
PAGODA_TARGET inline void axpy(float* acc, float p, const float* v, int64_t n) {
  const Vec pv = vset1(p);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) vstore(acc + i, vfma(pv, vload(v + i), vload(acc + i)));
  if (i < n) {
    const int t = static_cast<int>(n - i);
    vstore_tail(acc + i, vfma(pv, vload_tail(v + i, t), vload_tail(acc + i, t)), t);
  }
}

// Online softmax over the visible keys, read a chunk of a block at a time:
// score the chunk, rescale the running sum once per chunk, then accumulate
// the chunk's V rows.
PAGODA_TARGET void attention(const AttentionQuery& a, float* acc) {
  constexpr int kChunk = 32;
  const int hd = a.head_dim, bs = a.block_size;
  for (int d = 0; d < hd; ++d) acc[d] = 0.0f;
  float running_max = -__builtin_inff(), denom = 0.0f;
  float scores[kChunk];
  for (int64_t t = a.first_key; t <= a.last_key;) {
    const int64_t offset = t % bs;
    int64_t count = bs - offset;
    if (count > a.last_key - t + 1) count = a.last_key - t + 1;
    if (count > kChunk) count = kChunk;
    const int64_t slot0 = int64_t{a.block_table[t / bs]} * bs + offset;
    float chunk_max = -__builtin_inff();
    for (int64_t j = 0; j < count; ++j) {
      scores[j] = dot(a.q, a.k_head + (slot0 + j) * a.slot_stride, hd) * a.scale;
      chunk_max = scores[j] > chunk_max ? scores[j] : chunk_max;
    }
    if (chunk_max > running_max) {
      // exp(-inf) = 0 on the first chunk, where acc and denom are still 0.
      const float correction = __builtin_expf(running_max - chunk_max);
      running_max = chunk_max;
      denom *= correction;
      scale(acc, correction, acc, hd);
    }
    for (int64_t j = 0; j < count; ++j) {
      const float p = __builtin_expf(scores[j] - running_max);
      denom += p;
      axpy(acc, p, a.v_head + (slot0 + j) * a.slot_stride, hd);
    }
    t += count;
  }
  scale(acc, 1.0f / denom, a.out, hd);
}

}  // namespace

const cpu::KernelTable& kernel_table() {
  static const cpu::KernelTable table{linear_f32, linear_bf16, rms_norm_rows, add_rms_norm_rows,
                                      attention};
  return table;
}

}  // namespace pagoda::ops::PAGODA_ISA
