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
        if (i % (64 / sizeof(W)) == 0) __builtin_prefetch(w + (C + c) * k + i, 0, 1);
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

// ---- Math shared by the kernels below (softmax, silu) ------------------
#include "ops/cpu/vexp_impl.h"

// ---- Paged attention ---------------------------------------------------
// Keys are visited in the chunks of one fixed grid (each block's keys in
// runs of kKeyChunk from its start), every chunk clipped to the keys a
// query sees, and a query's scores, softmax and output are each one chain
// whose steps depend only on its own position. So a query's output does not
// depend on the other queries of its tile: a decode row equals the same row
// inside a prefill, bit for bit. A tile shares each chunk's K/V reads (from
// memory once, then from L1) between all its queries. K/V elements KV are
// float or bf16 (uint16_t); vload widens bf16 to f32 exactly in registers,
// so the arithmetic, and the rule above, are the same for both.
using cpu::kKeyChunk;
// Query rows per score block: 4 x 4 accumulators on AVX-512's 32
// registers, 2 x 4 on AVX2's 16.
constexpr int kScoreQueries = kLanes >= 16 ? 4 : 2;
// Query rows x head_dim vectors per P.V block (accumulators in registers).
constexpr int kValueQueries = 4, kValueVecs = kLanes >= 16 ? 4 : 2;

// s[i][c] = scale * q_i . k_c for NQ queries and 4 keys: one accumulator
// chain over head_dim per pair, then the vsum tree. pf_k / pf_v (or null):
// 4 K and V rows to prefetch meanwhile, spread over the loop, since a burst
// of prefetches stalls the loads behind it (8k-context decode attention on
// one thread: 4.4 -> 3.1-3.5 ms per layer, bench/attention_bench.cpp).
template <int NQ, typename KV>
PAGODA_TARGET inline void score_block(const float* const* q, const KV* const* k, int hd,
                                      float scale, float* const* s, int c0,
                                      const char* pf_k = nullptr, const char* pf_v = nullptr) {
  Vec acc[NQ][4];
#pragma GCC unroll 4
  for (int i = 0; i < NQ; ++i) {
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) acc[i][c] = vzero();
  }
  int d = 0;
  for (; d + kLanes <= hd; d += kLanes) {
    Vec kv[4];
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) kv[c] = vload(k[c] + d);
    if (pf_k) {
      constexpr int kBytes = 4 * kLanes * sizeof(KV);
#pragma GCC unroll 4
      for (int b = 0; b < kBytes; b += 64) {
        __builtin_prefetch(pf_k + d * 4 * int{sizeof(KV)} + b, 0, 1);
        __builtin_prefetch(pf_v + d * 4 * int{sizeof(KV)} + b, 0, 1);
      }
    }
#pragma GCC unroll 4
    for (int i = 0; i < NQ; ++i) {
      const Vec qv = vload(q[i] + d);
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) acc[i][c] = vfma(qv, kv[c], acc[i][c]);
    }
  }
  if (d < hd) {  // zero-padded lanes add exact zeros
    const int t = hd - d;
    Vec kv[4];
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) kv[c] = vload_tail(k[c] + d, t);
#pragma GCC unroll 4
    for (int i = 0; i < NQ; ++i) {
      const Vec qv = vload_tail(q[i] + d, t);
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) acc[i][c] = vfma(qv, kv[c], acc[i][c]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < NQ; ++i) {
    float sum[4];
    vsum4(acc[i][0], acc[i][1], acc[i][2], acc[i][3], sum);
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) s[i][c0 + c] = sum[c] * scale;
  }
}

// acc_i[d0, d0 + NV * kLanes) += sum_j p_i[j] v_j over the chunk's keys j,
// in key order (zero weights add exact zeros); TAIL: the last t < kLanes
// lanes of head_dim instead (NV = 1).
template <int NQ, int NV, bool TAIL = false, typename KV>
PAGODA_TARGET inline void value_block(const float* const* p, const KV* v, int64_t stride, int count,
                                      float* const* acc, int d0, int t = kLanes) {
  Vec a[NQ][NV];
#pragma GCC unroll 4
  for (int i = 0; i < NQ; ++i) {
#pragma GCC unroll 4
    for (int c = 0; c < NV; ++c)
      a[i][c] = TAIL ? vload_tail(acc[i] + d0, t) : vload(acc[i] + d0 + c * kLanes);
  }
  for (int j = 0; j < count; ++j) {
    const KV* vj = v + j * stride + d0;
    Vec vv[NV];
#pragma GCC unroll 4
    for (int c = 0; c < NV; ++c) vv[c] = TAIL ? vload_tail(vj, t) : vload(vj + c * kLanes);
#pragma GCC unroll 4
    for (int i = 0; i < NQ; ++i) {
      const Vec pi = vset1(p[i][j]);
#pragma GCC unroll 4
      for (int c = 0; c < NV; ++c) a[i][c] = vfma(pi, vv[c], a[i][c]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < NQ; ++i) {
#pragma GCC unroll 4
    for (int c = 0; c < NV; ++c) {
      if (TAIL) {
        vstore_tail(acc[i] + d0, a[i][c], t);
      } else {
        vstore(acc[i] + d0 + c * kLanes, a[i][c]);
      }
    }
  }
}

template <int NQ, typename KV>
PAGODA_TARGET inline void value_rows(const float* const* p, const KV* v, int64_t stride, int count,
                                     float* const* acc, int hd) {
  int d = 0;
  for (; d + kValueVecs * kLanes <= hd; d += kValueVecs * kLanes)
    value_block<NQ, kValueVecs>(p, v, stride, count, acc, d);
  for (; d + kLanes <= hd; d += kLanes) value_block<NQ, 1>(p, v, stride, count, acc, d);
  if (d < hd) value_block<NQ, 1, true>(p, v, stride, count, acc, d, hd - d);
}

// The queries of a tile that see at least one key of the current chunk.
struct ActiveQueries {
  int count = 0;
  const float* q[cpu::kMaxTileQueries];
  float* s[cpu::kMaxTileQueries];                          // scores, then weights, of the chunk
  float* acc[cpu::kMaxTileQueries];                        // unnormalised output
  int index[cpu::kMaxTileQueries];                         // query number in the tile
  int lo[cpu::kMaxTileQueries], hi[cpu::kMaxTileQueries];  // visible keys of the chunk
};

// Online softmax of one query over one chunk: rescale the running sum and
// output when the maximum grows, turn scores s[lo..hi] into weights (zero
// outside), add them to the denominator in key order.
PAGODA_TARGET inline void softmax_chunk(float* s, int count, int lo, int hi, float* acc, int hd,
                                        float& running_max, float& denom) {
  float chunk_max = s[lo];
  for (int j = lo + 1; j <= hi; ++j) chunk_max = s[j] > chunk_max ? s[j] : chunk_max;
  if (chunk_max > running_max) {
    // exp(-inf) = 0 on the query's first chunk, where acc and denom are 0.
    const float correction = __builtin_expf(running_max - chunk_max);
    running_max = chunk_max;
    denom *= correction;
    scale(acc, correction, acc, hd);
  }
  const Vec minus_max = vset1(-running_max);
  int j = 0;
  for (; j + kLanes <= count; j += kLanes) vstore(s + j, vexp(vadd(vload(s + j), minus_max)));
  if (j < count) {
    const int t = count - j;
    vstore_tail(s + j, vexp(vadd(vload_tail(s + j, t), minus_max)), t);
  }
  for (j = 0; j < lo; ++j) s[j] = 0.0f;
  for (j = hi + 1; j < count; ++j) s[j] = 0.0f;
  // The chunk's weights summed as vectors: a scalar chain through `denom`
  // (which may alias s, so every add went through memory) was ~8% of the
  // samples of decode attention in L2.
  Vec sum = vzero();
  for (j = 0; j + kLanes <= count; j += kLanes) sum = vadd(sum, vload(s + j));
  if (j < count) sum = vadd(sum, vload_tail(s + j, count - j));
  denom += vsum(sum);
}

// out = g / (1 + e^-g) * u, the exp vectorised (vexp's clamp keeps the
// extremes right: g < -87 gives ~0, g > 87 gives g).
PAGODA_TARGET inline Vec silu_times(Vec g, Vec u) {
  return vmul(vdiv(g, vadd(vset1(1.0f), vexp(vmul(g, vset1(-1.0f))))), u);
}

// V4's clamp (ops.h swiglu_limit): min and max are exact, so the clamped
// product is silu_times of the clamped values.
PAGODA_TARGET inline Vec clamped_silu_times(Vec g, Vec u, Vec lim, Vec neg_lim) {
  return silu_times(vmin(g, lim), vmax(vmin(u, lim), neg_lim));
}

PAGODA_TARGET void silu_mul_rows(const float* gate_up, int64_t inter, float limit, float* out,
                                 int64_t r0, int64_t r1) {
  const Vec lim = vset1(limit), neg_lim = vset1(-limit);
  for (int64_t r = r0; r < r1; ++r) {
    const float* g = gate_up + r * 2 * inter;
    const float* u = g + inter;
    float* o = out + r * inter;
    int64_t j = 0;
    if (limit > 0.0f) {
      for (; j + kLanes <= inter; j += kLanes)
        vstore(o + j, clamped_silu_times(vload(g + j), vload(u + j), lim, neg_lim));
      if (j < inter) {
        const int t = static_cast<int>(inter - j);
        vstore_tail(o + j,
                    clamped_silu_times(vload_tail(g + j, t), vload_tail(u + j, t), lim, neg_lim),
                    t);
      }
      continue;
    }
    for (; j + kLanes <= inter; j += kLanes) vstore(o + j, silu_times(vload(g + j), vload(u + j)));
    if (j < inter) {
      const int t = static_cast<int>(inter - j);
      vstore_tail(o + j, silu_times(vload_tail(g + j, t), vload_tail(u + j, t)), t);
    }
  }
}

// Keys ahead of the current chunk whose K/V rows the kernel asks for. Blocks
// lie anywhere in the pool and a chunk is one run inside a block (4 KiB per
// kv head at 16 keys x 128 bf16), so the hardware prefetcher, which stops at
// page boundaries, cannot run ahead across them: without this, long-context
// decode waits on memory latency at every chunk (13 GB/s of KV instead of
// ~25 at 8k context, bench/attention_bench.cpp).
constexpr int64_t kPrefetchKeys = 4 * kKeyChunk;

// Where the K and V rows of the chunk that starts at key t lie: up to the
// end of t's grid cell (kKeyChunk keys from its block's start, the block's
// end at most) and key `last`; no rows if t > last.
struct ChunkRows {
  const char* k = nullptr;
  const char* v = nullptr;
  int64_t rows = 0, row_bytes = 0;
};

template <typename KV>
PAGODA_TARGET inline __attribute__((always_inline)) ChunkRows locate_chunk(
    const cpu::AttentionTile& a, int64_t t, int64_t last) {
  if (t > last) return {};
  const int64_t offset = t % a.block_size;
  const int64_t cell_end = offset / kKeyChunk * kKeyChunk + kKeyChunk;
  int64_t rows = (cell_end < a.block_size ? cell_end : a.block_size) - offset;
  if (rows > last - t + 1) rows = last - t + 1;
  const int64_t first =
      int64_t{a.block_table[t / a.block_size]} * a.block_stride + offset * a.head_dim;
  return {reinterpret_cast<const char*>(static_cast<const KV*>(a.k_head) + first),
          reinterpret_cast<const char*>(static_cast<const KV*>(a.v_head) + first), rows,
          a.head_dim * int64_t{sizeof(KV)}};
}

// Prefetches (into L2) rows [j0, rows) of a chunk's K and V at once.
PAGODA_TARGET inline __attribute__((always_inline)) void prefetch_rows(const ChunkRows& c,
                                                                       int64_t j0) {
  for (int64_t i = j0 * c.row_bytes; i < c.rows * c.row_bytes; i += 64) {
    __builtin_prefetch(c.k + i, 0, 1);
    __builtin_prefetch(c.v + i, 0, 1);
  }
}


// The chunk kPrefetchKeys after key t of the stream made of tile a's keys
// and then those of the tile the thread runs next.
template <typename KV>
PAGODA_TARGET inline __attribute__((always_inline)) ChunkRows chunk_ahead(
    const cpu::AttentionTile& a, int64_t t, int64_t window) {
  const int64_t last = a.last_key + a.rows - 1, u = t + kPrefetchKeys;
  if (u <= last) return locate_chunk<KV>(a, u, last);
  if (a.next == nullptr) return {};
  const cpu::AttentionTile& next = *a.next;
  return locate_chunk<KV>(next, cpu::first_visible_key(next.last_key, window) + (u - last - 1),
                          next.last_key + next.rows - 1);
}

// The rows of kv head j of a chunk located for kv head 0.
template <typename KV>
PAGODA_TARGET inline ChunkRows kv_head_rows(ChunkRows c, int j, int64_t head_stride) {
  if (c.rows == 0) return c;
  const int64_t bytes = j * head_stride * int64_t{sizeof(KV)};
  c.k += bytes;
  c.v += bytes;
  return c;
}

// The number in the tile's state (TileState) of the query of kv head j,
// row r and q head h.
inline int tile_query(const cpu::AttentionTile& a, int j, int r, int h) {
  return (j * a.rows + r) * a.heads + h;
}

// A tile's running state: per query, its unnormalised output, one chunk's
// scores (then weights), running maximum and softmax denominator.
struct TileState {
  float* acc;          // [nq][hd]
  float* scores;       // [nq][kKeyChunk]
  float* running_max;  // [nq]
  float* denom;        // [nq]
  ActiveQueries act;
};

// Keys [t, t + chunk.rows) of the tile's kv head j: the scores, online
// softmax and P.V of the queries that see them, asking meanwhile for the
// rows of the chunk ahead.
template <typename KV>
PAGODA_TARGET inline __attribute__((always_inline)) void attend_chunk(const cpu::AttentionTile& a,
                                                                      int j, int64_t t,
                                                                      const ChunkRows& chunk,
                                                                      const ChunkRows& ahead,
                                                                      TileState& st) {
  const int hd = a.head_dim, count = static_cast<int>(chunk.rows);
  const int64_t end = t + count;
  // The chunk's rows are consecutive (stride head_dim) within its block.
  const auto* k0 = reinterpret_cast<const KV*>(chunk.k);
  const auto* v0 = reinterpret_cast<const KV*>(chunk.v);
  ActiveQueries& act = st.act;
  act.count = 0;
  for (int r = 0; r < a.rows; ++r) {
    const int64_t last = a.last_key + r, first = cpu::first_visible_key(last, a.sliding_window);
    if (last < t || first >= end) continue;
    for (int h = 0; h < a.heads; ++h) {
      const int i = tile_query(a, j, r, h), n = act.count++;
      act.index[n] = i;
      act.q[n] = a.q + r * a.q_row_stride + (j * a.heads + h) * hd;
      act.s[n] = st.scores + i * kKeyChunk;
      act.acc[n] = st.acc + int64_t{i} * hd;
      act.lo[n] = static_cast<int>((first > t ? first : t) - t);
      act.hi[n] = static_cast<int>((last < end - 1 ? last : end - 1) - t);
    }
  }
  // Scores, 4 keys at a time (keys past the chunk repeat its last key).
  for (int c0 = 0; c0 < count; c0 += 4) {
    const KV* k[4];
    for (int c = 0; c < 4; ++c) k[c] = k0 + int64_t{c0 + c < count ? c0 + c : count - 1} * hd;
    int i = 0;
    // The first score block asks for the same 4 rows of the chunk ahead.
    const bool ask = ahead.rows > c0;
    const char* pf_k = ask ? ahead.k + c0 * ahead.row_bytes : nullptr;
    const char* pf_v = ask ? ahead.v + c0 * ahead.row_bytes : nullptr;
    for (; i + kScoreQueries <= act.count; i += kScoreQueries, pf_k = pf_v = nullptr)
      score_block<kScoreQueries>(act.q + i, k, hd, a.scale, act.s + i, c0, pf_k, pf_v);
    for (; i + 2 <= act.count; i += 2, pf_k = pf_v = nullptr)  // decode: a kv head's q heads
      score_block<2>(act.q + i, k, hd, a.scale, act.s + i, c0, pf_k, pf_v);
    for (; i < act.count; ++i, pf_k = pf_v = nullptr)
      score_block<1>(act.q + i, k, hd, a.scale, act.s + i, c0, pf_k, pf_v);
  }
  // Rows of the chunk ahead past this (shorter) chunk's, all at once.
  prefetch_rows(ahead, (count + 3) / 4 * 4);
  for (int n = 0; n < act.count; ++n) {
    const int i = act.index[n];
    softmax_chunk(act.s[n], count, act.lo[n], act.hi[n], act.acc[n], hd, st.running_max[i],
                  st.denom[i]);
  }
  int n = 0;
  const float* const* p = act.s;
  for (; n + kValueQueries <= act.count; n += kValueQueries)
    value_rows<kValueQueries>(p + n, v0, hd, count, act.acc + n, hd);
  for (; n + 2 <= act.count; n += 2) value_rows<2>(p + n, v0, hd, count, act.acc + n, hd);
  for (; n < act.count; ++n) value_rows<1>(p + n, v0, hd, count, act.acc + n, hd);
}

template <typename KV>
PAGODA_TARGET void attention(const cpu::AttentionTile& a, float* scratch) {
  const int hd = a.head_dim, nq = a.rows * a.heads * a.kv_heads;
  const int64_t head_stride = int64_t{a.block_size} * hd;  // between kv heads' rows in a block
  TileState st;
  st.acc = scratch;
  st.scores = st.acc + nq * hd;
  st.running_max = st.scores + nq * kKeyChunk;
  st.denom = st.running_max + nq;
  for (int i = 0; i < nq * hd; ++i) st.acc[i] = 0.0f;
  for (int i = 0; i < nq; ++i) st.running_max[i] = -__builtin_inff(), st.denom[i] = 0.0f;
  const int64_t window = a.sliding_window;
  const int64_t first_key = cpu::first_visible_key(a.last_key, window);
  const int64_t last_tile_key = a.last_key + a.rows - 1;
  // The first chunks' rows (already asked for if the thread's previous tile
  // had this one as `next`): from then on each chunk asks for a later one.
  for (int64_t t = first_key + kKeyChunk; t < first_key + kPrefetchKeys; t += kKeyChunk) {
    const ChunkRows rows = locate_chunk<KV>(a, t, last_tile_key);
    for (int j = 0; j < a.kv_heads; ++j) prefetch_rows(kv_head_rows<KV>(rows, j, head_stride), 0);
  }
  for (int64_t t = first_key; t <= last_tile_key;) {
    const ChunkRows chunk = locate_chunk<KV>(a, t, last_tile_key);
    const ChunkRows ahead = chunk_ahead<KV>(a, t, window);
    for (int j = 0; j < a.kv_heads; ++j) {
      attend_chunk<KV>(a, j, t, kv_head_rows<KV>(chunk, j, head_stride),
                       kv_head_rows<KV>(ahead, j, head_stride), st);
    }
    t += chunk.rows;
  }
  for (int j = 0; j < a.kv_heads; ++j) {
    for (int r = 0; r < a.rows; ++r) {
      for (int h = 0; h < a.heads; ++h) {
        const int i = tile_query(a, j, r, h);
        scale(st.acc + int64_t{i} * hd, 1.0f / st.denom[i],
              a.out + r * a.q_row_stride + (j * a.heads + h) * hd, hd);
      }
    }
  }
}

#include "ops/cpu/fp8_linear_impl.h"
#include "ops/cpu/fp4_linear_impl.h"
#include "ops/cpu/rope_layer_norm_impl.h"

// MLA attention over the latent cache, built from the pieces above.
#include "ops/cpu/mla_impl.h"
#include "ops/cpu/mla_sparse_impl.h"
#include "ops/cpu/indexer_impl.h"
#include "ops/cpu/v4_attention_impl.h"

}  // namespace

const cpu::KernelTable& kernel_table() {
  static const cpu::KernelTable table = [] {
    cpu::KernelTable t{linear_f32,        linear_bf16,   rms_norm_rows,
                       add_rms_norm_rows, silu_mul_rows, attention<float>,
                       attention<uint16_t>};
    t.linear_fp8 = linear_fp8;
    t.linear_fp4 = linear_fp4;
    t.rope_slice = rope_slice;
    t.layer_norm_rows = layer_norm_rows;
    t.mla_attention = mla_attention<float>;
    t.mla_attention_bf16 = mla_attention<uint16_t>;
    t.mla_merge = mla_merge;
    t.mla_sparse_attention = mla_sparse_attention<float>;
    t.mla_sparse_attention_bf16 = mla_sparse_attention<uint16_t>;
    t.indexer_scores = indexer_scores;
    t.indexer_widen_keys = indexer_widen_keys;
    t.mla_attention_fp8 = mla_attention<uint8_t>;
    t.mla_sparse_attention_fp8 = mla_sparse_attention<uint8_t>;
    t.v4_attention = v4_attention;
    t.v4_finish = v4_finish;
    return t;
  }();
  return table;
}

}  // namespace pagoda::ops::PAGODA_ISA
