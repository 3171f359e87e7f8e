// Flash-attention tiles over a bf16 paged KV cache (AVX-512 BF16): prompt
// chunks and decode rows alike.
//
// A tile is up to kFlashQueries queries: consecutive query rows of one
// sequence x the q heads of one kv head (a GQA group), so every K/V row read
// from the cache serves all of them. Both products are vdpbf16ps dot
// products (bf16 x bf16 pairs summed into f32) with the queries across the
// 16 lanes of a vector:
//   S^T[key][query] = scale * sum over head_dim pairs of q . k: q packed once
//     per tile as bf16 pairs (rounded to nearest even), each key's pair
//     broadcast straight from its cache row;
//   O^T[d][query] += sum over key pairs of p . v: the weights p rounded to
//     bf16 pairs per query, V's rows interleaved by key pairs per block.
// The softmax stays f32 (online, flash-attention style: running max and
// denominator per query lane, the output rescaled when the max grows).
//
// Decode tiles (few queries) turn the score product around: keys across
// the lanes, K's rows transposed in registers, q pairs broadcast, so a dp
// serves 16 keys rather than the 2 queries of a GQA group; their P . V has
// head_dim across the lanes (value_keys). Each (query, key) still runs the
// same dot-product chain and f32 softmax steps in the same order, so the
// bits do not change.
//
// Every step is lane-wise: a query's output depends only on its own q and
// its keys, never on the other queries of its tile, the tile's shape or the
// threads. Keys are visited in blocks of one absolute grid (positions
// [kFlashKeys i, kFlashKeys (i + 1))), and a block a query does not see
// changes nothing of its lane (weights exactly 0, max unchanged, rescale by
// exactly 1). So all rows computed here agree bit for bit however the
// batch is cut; they differ from the f32 kernel (kernels_impl.h) by the
// bf16 rounding of q and p, which is why entry.cpp sends every row over a
// bf16 cache here or none (ops.h paged_attention): never a choice by the
// step's row count, which scheduling and prefix-cache hits change.
#include <immintrin.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "core/dtype.h"
#include "core/error.h"
#include "ops/cpu/kernels.h"
#include "ops/cpu/vec_avx512.h"

#define PAGODA_BF16_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma")))

namespace pagoda::ops::avx512bf16 {
namespace {

using namespace avx512;  // Vec, vset1, vfma, ... for vexp
#include "ops/cpu/vexp_impl.h"

constexpr int kQ = cpu::kFlashQueries;  // lanes of a tile's query vectors, padded
constexpr int kKeys = cpu::kFlashKeys;  // keys per block
constexpr int kPairs = kKeys / 2;
// Running max before a query has seen a key: finite, so the first rescale
// is exp(-1e30 - max) = 0 rather than exp(-inf + inf) = NaN.
constexpr float kNoMax = -1e30f;
// Tiles of at most this many queries accumulate P . V with head_dim across
// the lanes (value_keys): fewer instructions than one lane per query while
// count x head_dim / 16 < head_dim.
constexpr int kFewQueries = cpu::kFlashFewQueries;

// The tile's scratch (cpu::flash_scratch_floats), 64-byte aligned pieces.
struct Scratch {
  uint32_t* qp;  // [hd / 2][kQ]: q pairs
  float* o;      // unnormalised output: [hd][kQ] (transposed), or [kQ][hd] by_lane
  float* s;      // [kKeys][kQ]: scores, then weights
  uint32_t* pp;  // [kPairs][kQ]: weight pairs ([kFewQueries][kPairs] by keys)
  uint32_t* vp;  // [kPairs][hd]: V rows interleaved by key pairs (prompt tiles)
  float* m;      // [kQ]: running max
  float* l;      // [kQ]: softmax denominator
};

// A key's (d, d + 1) bf16 pair read as one 32-bit word (rows start at even
// elements, so 4-byte aligned).
typedef int32_t AliasedPair __attribute__((may_alias));

PAGODA_BF16_TARGET inline __m512 dot(__m512 acc, __m512i a, __m512i b) {
  return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b);
}

// S^T for keys k[0, KB) x NV query vectors: one dp chain over head_dim
// pairs per (key, lane).
template <int NV, int KB>
PAGODA_BF16_TARGET inline void score_rows(const uint32_t* qp, const uint16_t* const* k, int pairs,
                                          float scale, float* s) {
  __m512 acc[KB][NV];
#pragma GCC unroll 8
  for (int c = 0; c < KB; ++c) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[c][v] = _mm512_setzero_ps();
  }
  for (int p = 0; p < pairs; ++p) {
    __m512i qv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) qv[v] = _mm512_load_si512(qp + p * kQ + v * 16);
#pragma GCC unroll 8
    for (int c = 0; c < KB; ++c) {
      const __m512i kb = _mm512_set1_epi32(reinterpret_cast<const AliasedPair*>(k[c])[p]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[c][v] = dot(acc[c][v], qv[v], kb);
    }
  }
  const __m512 sc = _mm512_set1_ps(scale);
#pragma GCC unroll 8
  for (int c = 0; c < KB; ++c) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) _mm512_store_ps(s + c * kQ + v * 16, _mm512_mul_ps(acc[c][v], sc));
  }
}

// O^T rows [d0, d0 + DB) += P . V over the block's key pairs.
template <int NV, int DB>
PAGODA_BF16_TARGET inline void value_rows(const uint32_t* pp, const uint32_t* vp, int hd, int pairs,
                                          float* o, int d0) {
  __m512 acc[DB][NV];
#pragma GCC unroll 8
  for (int c = 0; c < DB; ++c) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[c][v] = _mm512_load_ps(o + (d0 + c) * kQ + v * 16);
  }
  for (int p = 0; p < pairs; ++p) {
    __m512i pv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) pv[v] = _mm512_load_si512(pp + p * kQ + v * 16);
#pragma GCC unroll 8
    for (int c = 0; c < DB; ++c) {
      const __m512i vb = _mm512_set1_epi32(static_cast<int32_t>(vp[p * hd + d0 + c]));
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[c][v] = dot(acc[c][v], pv[v], vb);
    }
  }
#pragma GCC unroll 8
  for (int c = 0; c < DB; ++c) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) _mm512_store_ps(o + (d0 + c) * kQ + v * 16, acc[c][v]);
  }
}

// A tile of few queries' outputs (o as [query][hd]): query i's row times
// lane i of corr.
PAGODA_BF16_TARGET inline void rescale_lanes(int count, __m512 corr, float* o, int hd) {
  alignas(64) float c16[16];
  _mm512_store_ps(c16, corr);
  for (int i = 0; i < count; ++i) {
    const __m512 ci = _mm512_set1_ps(c16[i]);
    for (int d = 0; d < hd; d += 16) {
      float* od = o + i * hd + d;
      _mm512_store_ps(od, _mm512_mul_ps(_mm512_load_ps(od), ci));
    }
  }
}

// Full-mask maskz forms: GCC 12's unmasked ones pass an undefined vector
// and trip -Wmaybe-uninitialized (as in vec_avx512.h).
PAGODA_BF16_TARGET inline __m512i unpacklo32(__m512i a, __m512i b) {
  return _mm512_maskz_unpacklo_epi32(0xffff, a, b);
}
PAGODA_BF16_TARGET inline __m512i unpackhi32(__m512i a, __m512i b) {
  return _mm512_maskz_unpackhi_epi32(0xffff, a, b);
}
PAGODA_BF16_TARGET inline __m512i unpacklo64(__m512i a, __m512i b) {
  return _mm512_maskz_unpacklo_epi64(0xff, a, b);
}
PAGODA_BF16_TARGET inline __m512i unpackhi64(__m512i a, __m512i b) {
  return _mm512_maskz_unpackhi_epi64(0xff, a, b);
}
template <unsigned N>
PAGODA_BF16_TARGET inline __m512i srli32(__m512i a) {
  return _mm512_maskz_srli_epi32(0xffff, a, N);
}
// 128-bit lanes 0 and 2 (even) or 1 and 3 (odd) of a, then the same of b.
PAGODA_BF16_TARGET inline __m512i lanes_even(__m512i a, __m512i b) {
  return _mm512_maskz_shuffle_i32x4(0xffff, a, b, 0x88);
}
PAGODA_BF16_TARGET inline __m512i lanes_odd(__m512i a, __m512i b) {
  return _mm512_maskz_shuffle_i32x4(0xffff, a, b, 0xdd);
}

// The largest of v's lanes in mask (-inf if none): exact in any order.
PAGODA_BF16_TARGET inline float masked_max(__mmask16 mask, __m512 v) {
  v = _mm512_mask_mov_ps(_mm512_set1_ps(-__builtin_inff()), mask, v);
  v = vmax(v, _mm512_maskz_shuffle_f32x4(0xffff, v, v, 0x4e));
  v = vmax(v, _mm512_maskz_shuffle_f32x4(0xffff, v, v, 0xb1));
  v = vmax(v, _mm512_maskz_permute_ps(0xffff, v, 0x4e));
  v = vmax(v, _mm512_maskz_permute_ps(0xffff, v, 0xb1));
  return _mm512_cvtss_f32(v);
}

// r[j] word p becomes r[p] word j (a 16 x 16 transpose of 32-bit words):
// 16 keys' rows of 16 pairs in, one vector of the 16 keys per pair out.
PAGODA_BF16_TARGET inline void transpose16(__m512i r[16]) {
  __m512i t[16];
#pragma GCC unroll 8
  for (int j = 0; j < 16; j += 2) {
    t[j] = unpacklo32(r[j], r[j + 1]);
    t[j + 1] = unpackhi32(r[j], r[j + 1]);
  }
#pragma GCC unroll 8
  for (int j = 0; j < 16; j += 4) {
    r[j] = unpacklo64(t[j], t[j + 2]);
    r[j + 1] = unpackhi64(t[j], t[j + 2]);
    r[j + 2] = unpacklo64(t[j + 1], t[j + 3]);
    r[j + 3] = unpackhi64(t[j + 1], t[j + 3]);
  }
  // Now 128-bit lane c of r[4a + b] holds pair 4c + b of keys 4a..4a+3;
  // pair 4c + b wants lane c of r[b], r[4 + b], r[8 + b], r[12 + b].
#pragma GCC unroll 4
  for (int b = 0; b < 4; ++b) {
    t[b] = lanes_even(r[b], r[4 + b]);
    t[4 + b] = lanes_odd(r[b], r[4 + b]);
    t[8 + b] = lanes_even(r[8 + b], r[12 + b]);
    t[12 + b] = lanes_odd(r[8 + b], r[12 + b]);
  }
#pragma GCC unroll 4
  for (int b = 0; b < 4; ++b) {
    r[b] = lanes_even(t[b], t[8 + b]);           // pair b
    r[8 + b] = lanes_odd(t[b], t[8 + b]);        // pair 8 + b
    r[4 + b] = lanes_even(t[4 + b], t[12 + b]);  // pair 4 + b
    r[12 + b] = lanes_odd(t[4 + b], t[12 + b]);  // pair 12 + b
  }
}

// The K and V rows of keys [lo, hi] of one kv head (kv head h of tile a:
// its rows h * block_size * head_dim elements after the tile's), handed out
// as prefetches into L2 a few lines at a time while a decode tile computes
// the block before them: K's rows, then V's, cache block by cache block, in
// address order. So the next block's reads overlap this block's arithmetic
// rather than following it (bench/batched_decode.md, session 20: a decode
// step's attention ~15-40% faster on Zen 4 than reading each block first).
class NextRows {
 public:
  NextRows() = default;  // nothing to ask for
  NextRows(const cpu::AttentionTile& a, int h, int64_t lo, int64_t hi)
      : a_(lo <= hi ? &a : nullptr), h_(h), lo_(lo), hi_(hi), t_(lo) {
    if (a_ != nullptr) start_run();
  }
  PAGODA_BF16_TARGET void step(int lines) {
    while (lines > 0 && a_ != nullptr) {
      // The lines left in this run, then the next run.
      const int64_t n = std::min<int64_t>((bytes_ - off_ + 63) / 64, lines);
      for (int64_t i = 0; i < n; ++i) _mm_prefetch(run_ + off_ + 64 * i, _MM_HINT_T1);
      lines -= static_cast<int>(n);
      if ((off_ += 64 * n) >= bytes_) next_run();
    }
  }

 private:
  // The run from key t_ to the end of its cache block (or hi_).
  void start_run() {
    const int64_t bs = a_->block_size, hd = a_->head_dim;
    const int64_t end = (t_ / bs + 1) * bs - 1 < hi_ ? (t_ / bs + 1) * bs - 1 : hi_;
    const auto* base = static_cast<const uint16_t*>(kv_ ? a_->v_head : a_->k_head);
    run_ = reinterpret_cast<const char*>(
        base + int64_t{a_->block_table[t_ / bs]} * a_->block_stride + (h_ * bs + t_ % bs) * hd);
    bytes_ = (end - t_ + 1) * hd * 2;
    off_ = 0;
    t_ = end + 1;
  }
  void next_run() {
    if (t_ > hi_) {
      if (kv_ == 1) {
        a_ = nullptr;
        return;
      }
      kv_ = 1, t_ = lo_;
    }
    start_run();
  }
  const cpu::AttentionTile* a_ = nullptr;
  int64_t h_ = 0, lo_ = 0, hi_ = -1, t_ = 0;
  int kv_ = 0;  // 0: K rows, 1: V rows
  const char* run_ = nullptr;
  int64_t bytes_ = 0, off_ = 0;
};

// Scores of NC x 16 keys k[0, 16 NC) for C queries (C a power of two;
// lanes past the tile's count have zero q pairs), keys across the lanes:
// s[c][i] lane j = scale x the dp chain over head_dim pairs, in order, of
// q_i . k_{16c + j}: the chain score_rows runs for (key 16c + j, lane i)
// with its operands swapped, and vdpbf16ps multiplies exactly, so the bits
// are the same. Asks for 16 NC lines of `next` per 16 pairs.
template <int C, int NC>
PAGODA_BF16_TARGET inline void score_keys(const uint32_t* qp, const uint16_t* const* k, int pairs,
                                          float scale, __m512 (*s)[C], NextRows& next) {
  __m512 acc[NC][C];
#pragma GCC unroll 2
  for (int c = 0; c < NC; ++c) {
#pragma GCC unroll 8
    for (int i = 0; i < C; ++i) acc[c][i] = _mm512_setzero_ps();
  }
  for (int p0 = 0; p0 < pairs; p0 += 16) {
    next.step(16 * NC);
    // The NC chunks' chains are independent: both in one loop keep twice
    // the dp chains in flight (a chain waits out each dp's latency).
#pragma GCC unroll 2
    for (int c = 0; c < NC; ++c) {
      __m512i r[16];
#pragma GCC unroll 16
      for (int j = 0; j < 16; ++j) r[j] = _mm512_loadu_si512(k[16 * c + j] + 2 * p0);
      transpose16(r);
#pragma GCC unroll 16
      for (int p = 0; p < 16; ++p) {
#pragma GCC unroll 8
        for (int i = 0; i < C; ++i) {
          const __m512i q = _mm512_set1_epi32(static_cast<int32_t>(qp[(p0 + p) * kQ + i]));
          acc[c][i] = dot(acc[c][i], q, r[p]);
        }
      }
    }
  }
  const __m512 sc = _mm512_set1_ps(scale);
#pragma GCC unroll 2
  for (int c = 0; c < NC; ++c) {
#pragma GCC unroll 8
    for (int i = 0; i < C; ++i) s[c][i] = _mm512_mul_ps(acc[c][i], sc);
  }
}

// Rows a and b of 32 bf16 values each, interleaved as key pairs: word i of
// `first` is (a[i], b[i]) for i < 16, of `second` (a[16 + i], b[16 + i]).
PAGODA_BF16_TARGET inline void interleave_rows(const uint16_t* a, const uint16_t* b, __m512i& first,
                                               __m512i& second) {
  alignas(64) static const uint16_t kLo[32] = {0,  32, 1,  33, 2,  34, 3,  35, 4,  36, 5,
                                               37, 6,  38, 7,  39, 8,  40, 9,  41, 10, 42,
                                               11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  const __m512i lo = _mm512_load_si512(kLo);
  const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
  const __m512i va = _mm512_loadu_si512(a), vb = _mm512_loadu_si512(b);
  first = _mm512_permutex2var_epi16(va, lo, vb);
  second = _mm512_permutex2var_epi16(va, hi, vb);
}

// P . V with head_dim across the lanes, for tiles of few queries (decode: a
// GQA group's heads of one row): O[i][d0, d0 + 16 DV) += P_i . V for the
// queries i < count (of C), query i's weight pairs at pp + i * kPairs. V's
// rows are interleaved by key pairs in registers as they are read (the
// pairs value_rows reads from vp), and every lane runs value_rows's chain
// for its (d, i): one dp per key pair, pairs in order, the same operands.
// So the bits are the same; only the instruction count falls from hd to
// count x hd / 16 per pair, and V is neither stored nor read back. Asks for
// 8 lines of `next` per key pair (each call: calls for more dims ask on).
template <int C, int DV>
PAGODA_BF16_TARGET inline void value_keys(int count, const uint32_t* pp, const uint16_t* const* v,
                                          int np, float* o, int hd, int d0, NextRows& next) {
  static_assert(DV % 2 == 0 && C * DV <= 16, "accumulators and the interleaved V fit 32 zmm");
  __m512 acc[C][DV];
#pragma GCC unroll 8
  for (int i = 0; i < C; ++i) {
#pragma GCC unroll 8
    for (int c = 0; c < DV; ++c)
      acc[i][c] = i < count ? _mm512_load_ps(o + i * hd + d0 + 16 * c) : _mm512_setzero_ps();
  }
  for (int p = 0; p < np; ++p) {
    next.step(8);
    __m512i vi[DV];
#pragma GCC unroll 4
    for (int c = 0; c < DV; c += 2)  // dims d0 + 16c + [0, 32)
      interleave_rows(v[2 * p] + d0 + 16 * c, v[2 * p + 1] + d0 + 16 * c, vi[c], vi[c + 1]);
#pragma GCC unroll 8
    for (int i = 0; i < C; ++i) {
      if (i >= count) break;
      const __m512i pb = _mm512_set1_epi32(static_cast<int32_t>(pp[i * kPairs + p]));
#pragma GCC unroll 8
      for (int c = 0; c < DV; ++c) acc[i][c] = dot(acc[i][c], pb, vi[c]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < C; ++i) {
    if (i >= count) break;
#pragma GCC unroll 8
    for (int c = 0; c < DV; ++c) _mm512_store_ps(o + i * hd + d0 + 16 * c, acc[i][c]);
  }
}

// The tile's query lanes: lane i = row i / heads, q head i % heads.
struct Lanes {
  int count;     // rows * heads
  int nv;        // query vectors, ceil(count / 16)
  bool by_lane;  // a decode tile: attend_by_keys, output as [kQ][hd] (value_keys)
  alignas(64) int32_t first_key[kQ], last_key[kQ];  // visible keys per lane
};

// Loads every line of keys [lo, hi]'s K and V rows of the tile's kv heads,
// cache block by cache block, K then V, each head's rows after the
// previous head's: the order they lie in memory. A decode tile's first key
// block is read this way before its arithmetic: plain loads in address
// order keep many misses in flight and let the hardware prefetchers run,
// where the scattered reads of the arithmetic leave attention at half the
// read bandwidth (bench/batched_decode.md, session 19). Its later blocks
// (and the first of the thread's next tile) come from NextRows meanwhile.
PAGODA_BF16_TARGET void load_key_block(const cpu::AttentionTile* tiles, int kv_heads, int64_t lo,
                                       int64_t hi) {
  const cpu::AttentionTile& a = tiles[0];
  const int64_t row_bytes = int64_t{a.head_dim} * 2;
  __m512i any = _mm512_setzero_si512();
  for (int64_t b0 = lo; b0 <= hi; b0 = (b0 / a.block_size + 1) * a.block_size) {
    const int64_t end = (b0 / a.block_size + 1) * a.block_size - 1;
    const int64_t bytes = ((end < hi ? end : hi) - b0 + 1) * row_bytes;
    const int64_t off = (int64_t{a.block_table[b0 / a.block_size]} * a.block_stride +
                         (b0 % a.block_size) * a.head_dim) *
                        2;
    for (int kv = 0; kv < 2; ++kv) {
      for (int h = 0; h < kv_heads; ++h) {
        const char* rows = static_cast<const char*>(kv ? tiles[h].v_head : tiles[h].k_head) + off;
        for (int64_t o = 0; o < bytes; o += 64)
          any = _mm512_or_si512(any, _mm512_loadu_si512(rows + o));
      }
    }
  }
  __asm__ volatile("" : : "v"(any));  // the loads are the point
}

// One key block of a tile of few queries, keys across the lanes: keys [lo,
// lo + count), rows k[0, padded) and v[0, padded) (padded even; k readable
// to 32 rows). Each (query, key) goes through the steps of the
// queries-across-lanes path in the same order: its score's dp chain
// (score_keys), the max over the visible keys (exact in any order), the
// rescale by exp(old max - new max), exp(s - max), the denominator summed
// key by key in key order, the weights rounded to bf16 pairs (2i, 2i + 1),
// and P . V (value_keys). Meanwhile it asks for the lines of `next` (the
// next 32 keys' K and V rows: 256 lines at head_dim 128), spread over the
// scores and P . V, the rest at the end.
template <int C>
PAGODA_BF16_TARGET void attend_by_keys(const Scratch& st, const Lanes& lanes,
                                       const uint16_t* const* k, const uint16_t* const* v,
                                       int64_t lo, int count, int padded, int hd, float scale,
                                       NextRows& next) {
  const int chunks = (padded + 15) / 16;  // 1 or 2 vectors of 16 keys
  __m512 s[2][C];
  // Both chunks in one loop where their accumulators leave room for the
  // transposed rows (C <= 4), else one after the other.
  if (chunks == 2 && C <= 4) {
    score_keys<C, 2>(st.qp, k, hd / 2, scale, s, next);
  } else {
    for (int c = 0; c < chunks; ++c)
      score_keys<C, 1>(st.qp, k + 16 * c, hd / 2, scale, s + c, next);
  }
  // Visible keys per query, and its new running max.
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  __mmask16 vis[2][C];
  alignas(64) float mx[16];
  _mm512_store_ps(mx, _mm512_load_ps(st.m));
  for (int i = 0; i < lanes.count; ++i) {
    for (int c = 0; c < chunks; ++c) {
      const __m512i key =
          _mm512_add_epi32(_mm512_set1_epi32(static_cast<int32_t>(lo + 16 * c)), lane);
      const int in_chunk = count - 16 * c;
      const auto in_block = static_cast<__mmask16>(in_chunk >= 16 ? 0xffff : (1u << in_chunk) - 1);
      vis[c][i] = _mm512_cmple_epi32_mask(_mm512_set1_epi32(lanes.first_key[i]), key) &
                  _mm512_cmple_epi32_mask(key, _mm512_set1_epi32(lanes.last_key[i])) & in_block;
      const float block_max = masked_max(vis[c][i], s[c][i]);
      if (block_max > mx[i]) mx[i] = block_max;
    }
  }
  // Rescale the queries whose max grew (by exactly 1 elsewhere: skipped
  // when none grew); lane i is query i, as in the other path.
  const __m512 old = _mm512_load_ps(st.m), grown = _mm512_load_ps(mx);
  if (_mm512_cmp_ps_mask(grown, old, _CMP_GT_OQ)) {
    const __m512 corr = vexp(_mm512_sub_ps(old, grown));
    _mm512_store_ps(st.l, _mm512_mul_ps(_mm512_load_ps(st.l), corr));
    rescale_lanes(lanes.count, corr, st.o, hd);
    _mm512_store_ps(st.m, grown);
  }
  // Weights, the denominator key by key, the weight pairs per query.
  for (int i = 0; i < lanes.count; ++i) {
    alignas(64) float p[32];
    const __m512 m = _mm512_set1_ps(mx[i]);
    for (int c = 0; c < chunks; ++c)
      _mm512_store_ps(p + 16 * c, _mm512_maskz_mov_ps(vis[c][i], vexp(_mm512_sub_ps(s[c][i], m))));
    float sum = st.l[i];
    for (int j = 0; j < padded; ++j) sum += p[j];
    st.l[i] = sum;
    uint32_t* pairs = st.pp + i * kPairs;
    if (chunks == 2) {
      _mm512_store_si512(pairs,
                         (__m512i)_mm512_cvtne2ps_pbh(_mm512_load_ps(p + 16), _mm512_load_ps(p)));
    } else {
      _mm256_store_si256(reinterpret_cast<__m256i*>(pairs),
                         (__m256i)_mm512_cvtneps_pbh(_mm512_load_ps(p)));
    }
  }
  // O[i] += P . V, 16 DV dims at a time (as many as 16 accumulators hold).
  constexpr int kDV = C <= 2 ? 8 : 16 / C;
  const int np = padded / 2;
  for (int d = 0; d < hd;) {
    if (hd - d >= 16 * kDV) {
      value_keys<C, kDV>(lanes.count, st.pp, v, np, st.o, hd, d, next);
      d += 16 * kDV;
    } else {
      value_keys<C, 2>(lanes.count, st.pp, v, np, st.o, hd, d, next);
      d += 32;
    }
  }
  next.step(INT_MAX);
}

// The first key any row of the tile sees (row 0's).
inline int64_t first_key_of(const cpu::AttentionTile& a) {
  return cpu::first_visible_key(a.last_key, a.sliding_window);
}

template <int NV>
PAGODA_BF16_TARGET void attend_blocks(const cpu::AttentionTile* tiles, const Scratch* scratches,
                                      int kv_heads, const Lanes& lanes) {
  // The kv heads differ only in their K/V rows and scratch (same rows,
  // keys and block table), so they go through each key block in lockstep.
  const cpu::AttentionTile& a = tiles[0];
  const int hd = a.head_dim, pairs = hd / 2;
  const int64_t last_tile_key = a.last_key + a.rows - 1;
  const int64_t first_key = first_key_of(a);
  // Keys every row sees: [all_first, all_last].
  const int64_t all_last = a.last_key;
  const int64_t all_first = cpu::first_visible_key(last_tile_key, a.sliding_window);
  for (int64_t t0 = first_key / kKeys * kKeys; t0 <= last_tile_key; t0 += kKeys) {
    // From an even key: weights pair keys (2i, 2i + 1) whatever the tile's
    // first key (the pairing sets the rounding of p . v).
    const int64_t even_first = first_key & ~int64_t{1};
    const int64_t lo = t0 > even_first ? t0 : even_first;
    const int64_t hi = t0 + kKeys - 1 < last_tile_key ? t0 + kKeys - 1 : last_tile_key;
    const int count = static_cast<int>(hi - lo + 1);  // keys [lo, hi] of the block
    const int padded = (count + 1) / 2 * 2;
    // A decode tile reads its first block before the arithmetic; each
    // later block (this tile's next, or the first of the thread's next
    // tile) is asked for during the arithmetic of the one before.
    if (lanes.by_lane && t0 == first_key / kKeys * kKeys) load_key_block(tiles, kv_heads, lo, hi);
    const cpu::AttentionTile* nt = t0 + kKeys > last_tile_key ? a.next : &a;
    int64_t next_lo = 0, next_hi = -1;
    if (nt == &a) {
      next_lo = t0 + kKeys;
      next_hi = t0 + 2 * kKeys - 1 < last_tile_key ? t0 + 2 * kKeys - 1 : last_tile_key;
    } else if (nt != nullptr) {
      // From the key the next tile visits first to the end of its grid
      // block (its visible keys only: the blocks before a sliding window's
      // may be released).
      next_lo = first_key_of(*nt) & ~int64_t{1};
      next_hi = nt->last_key + nt->rows - 1;
      if (next_lo / kKeys * kKeys + kKeys - 1 < next_hi)
        next_hi = next_lo / kKeys * kKeys + kKeys - 1;
    }
    // The keys' rows (elements from a kv head's k_head / v_head), the same
    // for every kv head; a padding key repeats the last one (its weight is 0).
    int64_t row[kKeys];
    for (int64_t j = 0, blk = lo / a.block_size, in = lo % a.block_size; j < count; ++j) {
      row[j] = int64_t{a.block_table[blk]} * a.block_stride + in * hd;
      if (++in == a.block_size) in = 0, ++blk;
    }
    if (padded > count) row[count] = row[count - 1];
    for (int h = 0; h < kv_heads; ++h) {
      const Scratch& st = scratches[h];
      const auto* kc = static_cast<const uint16_t*>(tiles[h].k_head);
      const auto* vc = static_cast<const uint16_t*>(tiles[h].v_head);
      const uint16_t* k[kKeys + 8];
      const uint16_t* v[kKeys];
      for (int j = 0; j < padded; ++j) {
        k[j] = kc + row[j];
        v[j] = vc + row[j];
      }
      for (int j = padded; j < kKeys + 8; ++j) k[j] = k[padded - 1];
      if constexpr (NV == 1) {
        if (lanes.by_lane) {
          // The next tile's kv head h, if it has one.
          NextRows next;
          if (nt != nullptr && h < nt->kv_heads) next = NextRows(*nt, h, next_lo, next_hi);
          // Queries padded to a power of two (zero q pairs, never read).
          if (lanes.count <= 1) {
            attend_by_keys<1>(st, lanes, k, v, lo, count, padded, hd, a.scale, next);
          } else if (lanes.count <= 2) {
            attend_by_keys<2>(st, lanes, k, v, lo, count, padded, hd, a.scale, next);
          } else if (lanes.count <= 4) {
            attend_by_keys<4>(st, lanes, k, v, lo, count, padded, hd, a.scale, next);
          } else {
            attend_by_keys<8>(st, lanes, k, v, lo, count, padded, hd, a.scale, next);
          }
          continue;
        }
      }
      // Scores, 4 keys x NV query vectors at a time (16 accumulators),
      // asking meanwhile for the K and V rows of the next block (into L2):
      // blocks lie anywhere in the pool, beyond the hardware prefetcher's
      // reach, and a long context's K/V do not stay in L2 between tiles.
      // At the tile's last block: the first block of the tile the thread
      // runs next (next_lo, next_hi above; a prompt tile has one kv head).
      const uint16_t* pkc = nt != nullptr ? static_cast<const uint16_t*>(nt->k_head) : nullptr;
      const uint16_t* pvc = nt != nullptr ? static_cast<const uint16_t*>(nt->v_head) : nullptr;
      // Spread over the score calls however few keys this block has.
      const int per_call = (kKeys + (padded + 3) / 4 - 1) / ((padded + 3) / 4);
      for (int j = 0; j < padded; j += 4) {
        const int64_t from = next_lo + j / 4 * per_call;
        for (int64_t t = from; nt != nullptr && t <= next_hi && t < from + per_call; ++t) {
          const int64_t off = int64_t{nt->block_table[t / nt->block_size]} * nt->block_stride +
                              (t % nt->block_size) * hd;
          for (int b = 0; b < hd * 2; b += 64) {
            _mm_prefetch(reinterpret_cast<const char*>(pkc + off) + b, _MM_HINT_T1);
            _mm_prefetch(reinterpret_cast<const char*>(pvc + off) + b, _MM_HINT_T1);
          }
        }
        score_rows<NV, 4>(st.qp, k + j, pairs, a.scale, st.s + j * kQ);
      }
      // Online softmax per lane; keys a lane does not see get weight 0.
      const bool masked = lo < all_first || hi > all_last || count != padded;
      for (int vi = 0; vi < NV; ++vi) {
        const __m512i first = _mm512_load_si512(lanes.first_key + vi * 16);
        const __m512i last = _mm512_load_si512(lanes.last_key + vi * 16);
        __mmask16 vis[kKeys];
        __m512 mx = _mm512_load_ps(st.m + vi * 16);
        const __m512 old = mx;
        for (int j = 0; j < padded; ++j) {
          const __m512i key = _mm512_set1_epi32(static_cast<int32_t>(lo + j));
          vis[j] = masked ? static_cast<__mmask16>(_mm512_cmple_epi32_mask(first, key) &
                                                   _mm512_cmple_epi32_mask(key, last) &
                                                   (j < count ? 0xffff : 0))
                          : static_cast<__mmask16>(0xffff);
          mx = _mm512_mask_max_ps(mx, vis[j], mx, _mm512_load_ps(st.s + j * kQ + vi * 16));
        }
        // Rescale the lanes whose max grew (by exactly 1 elsewhere: skipped
        // when no lane grew).
        const __mmask16 grew = _mm512_cmp_ps_mask(mx, old, _CMP_GT_OQ);
        if (grew) {
          const __m512 corr = vexp(_mm512_sub_ps(old, mx));
          _mm512_store_ps(st.l + vi * 16, _mm512_mul_ps(_mm512_load_ps(st.l + vi * 16), corr));
          for (int d = 0; d < hd; ++d) {
            float* od = st.o + d * kQ + vi * 16;
            _mm512_store_ps(od, _mm512_mul_ps(_mm512_load_ps(od), corr));
          }
          _mm512_store_ps(st.m + vi * 16, mx);
        }
        __m512 sum = _mm512_load_ps(st.l + vi * 16);
        for (int j = 0; j < padded; ++j) {
          float* sj = st.s + j * kQ + vi * 16;
          const __m512 p = _mm512_maskz_mov_ps(vis[j], vexp(_mm512_sub_ps(_mm512_load_ps(sj), mx)));
          sum = _mm512_add_ps(sum, p);
          _mm512_store_ps(sj, p);
        }
        _mm512_store_ps(st.l + vi * 16, sum);
        // Weights as bf16 pairs (keys 2i, 2i + 1) per lane.
        alignas(64) static const uint16_t kPairIdx[32] = {
            0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
            8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
        const __m512i idx = _mm512_load_si512(kPairIdx);
        for (int j = 0; j < padded; j += 2) {
          const __m512i both =
              (__m512i)_mm512_cvtne2ps_pbh(_mm512_load_ps(st.s + (j + 1) * kQ + vi * 16),
                                           _mm512_load_ps(st.s + j * kQ + vi * 16));
          _mm512_store_si512(st.pp + j / 2 * kQ + vi * 16, _mm512_permutexvar_epi16(idx, both));
        }
      }
      // V interleaved by key pairs, then O^T += P . V.
      const int np = padded / 2;
      for (int p = 0; p < np; ++p) {
        for (int d = 0; d < hd; d += 32) {
          __m512i first, second;
          interleave_rows(v[2 * p] + d, v[2 * p + 1] + d, first, second);
          _mm512_storeu_si512(st.vp + p * hd + d, first);
          _mm512_storeu_si512(st.vp + p * hd + d + 16, second);
        }
      }
      for (int d = 0; d < hd; d += 4) value_rows<NV, 4>(st.pp, st.vp, hd, np, st.o, d);
    }
  }
}

}  // namespace
}  // namespace pagoda::ops::avx512bf16

namespace pagoda::ops::cpu::avx512bf16_impl {

using namespace avx512bf16;

namespace {

// Carves one kv head's Scratch out of flash_scratch_floats(hd) floats.
Scratch scratch_at(float* scratch, int hd) {
  const int pairs = hd / 2;
  Scratch st;
  // 64-byte aligned pieces (scratch itself may not be).
  auto* base =
      reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch) + 63) & ~uintptr_t{63});
  st.qp = reinterpret_cast<uint32_t*>(base);
  st.o = base + pairs * kQ;
  st.s = st.o + hd * kQ;
  st.pp = reinterpret_cast<uint32_t*>(st.s + kKeys * kQ);
  st.vp = st.pp + kPairs * kQ;
  st.m = reinterpret_cast<float*>(st.vp + kPairs * hd);
  st.l = st.m + kQ;
  return st;
}

// The bf16 bits of x[0, 16), as f32_to_bf16 rounds them (to nearest even,
// NaNs quieted, denormals kept: vcvtneps2bf16 would flush those), in the
// low halves of the 32-bit lanes.
PAGODA_BF16_TARGET inline __m512i bf16_bits(const float* x) {
  const __m512i bits = _mm512_loadu_si512(x);
  const __m512i odd = _mm512_and_si512(srli32<16>(bits), _mm512_set1_epi32(1));
  const __m512i rounded =
      srli32<16>(_mm512_add_epi32(bits, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd)));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(
      _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  return _mm512_mask_or_epi32(rounded, nan, srli32<16>(bits), _mm512_set1_epi32(0x40));
}

// q[0, 32) as 16 bf16 pair words: the low halves of the two vectors'
// lanes, in order.
PAGODA_BF16_TARGET inline __m512i q_pairs(const float* q) {
  alignas(64) static const uint16_t kLowHalves[32] = {0,  2,  4,  6,  8,  10, 12, 14, 16, 18, 20,
                                                      22, 24, 26, 28, 30, 32, 34, 36, 38, 40, 42,
                                                      44, 46, 48, 50, 52, 54, 56, 58, 60, 62};
  return _mm512_permutex2var_epi16(bf16_bits(q), _mm512_load_si512(kLowHalves), bf16_bits(q + 16));
}

// q pairs (rounded to bf16, padding lanes 0) in the vectors the tile reads,
// the output zeroed there, the running max and denominator reset.
PAGODA_BF16_TARGET void start_tile(const AttentionTile& a, const Lanes& lanes, const Scratch& st) {
  const int hd = a.head_dim, pairs = hd / 2;
  // The q pairs of the vectors the tile reads (a decode tile: 16 lanes, not
  // kQ), 16 lanes x 16 pairs at a time: each lane's row rounded as a
  // vector, then transposed to a vector per pair; lanes past count are 0.
  const float* q_row[kQ];
  for (int i = 0; i < lanes.count; ++i)
    q_row[i] = a.q + (i / a.heads) * a.q_row_stride + (i % a.heads) * hd;
  for (int v = 0; v < lanes.nv; ++v) {
    for (int p0 = 0; p0 < pairs; p0 += 16) {
      __m512i r[16];
#pragma GCC unroll 16
      for (int j = 0; j < 16; ++j) {
        const int i = v * 16 + j;
        r[j] = i < lanes.count ? q_pairs(q_row[i] + 2 * p0) : _mm512_setzero_si512();
      }
      transpose16(r);
#pragma GCC unroll 16
      for (int p = 0; p < 16; ++p) _mm512_store_si512(st.qp + (p0 + p) * kQ + v * 16, r[p]);
    }
  }
  if (lanes.by_lane) {
    for (int i = 0; i < lanes.count * hd; ++i) st.o[i] = 0.0f;
  } else {
    for (int d = 0; d < hd; ++d) {
      for (int i = 0; i < lanes.nv * 16; ++i) st.o[d * kQ + i] = 0.0f;
    }
  }
  for (int i = 0; i < kQ; ++i) st.m[i] = kNoMax, st.l[i] = 0.0f;
}

PAGODA_BF16_TARGET void finish_tile(const AttentionTile& a, const Lanes& lanes, const Scratch& st) {
  const int hd = a.head_dim;
  float* out_row[kQ];  // query i's output row
  for (int i = 0; i < lanes.count; ++i)
    out_row[i] = a.out + (i / a.heads) * a.q_row_stride + (i % a.heads) * hd;
  if (lanes.by_lane) {
    for (int i = 0; i < lanes.count; ++i) {
      float* out = out_row[i];
      const float inv = 1.0f / st.l[i];
      for (int d = 0; d < hd; ++d) out[d] = st.o[i * hd + d] * inv;
    }
    return;
  }
  // O^T's 16 x 16 blocks times each lane's 1 / l (the same correctly
  // rounded quotient and product as one lane at a time), transposed back
  // to rows of the output.
  for (int v = 0; v < lanes.nv; ++v) {
    const __m512 inv = _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_load_ps(st.l + v * 16));
    for (int d0 = 0; d0 < hd; d0 += 16) {
      __m512i r[16];
#pragma GCC unroll 16
      for (int j = 0; j < 16; ++j) {
        r[j] =
            _mm512_castps_si512(_mm512_mul_ps(_mm512_load_ps(st.o + (d0 + j) * kQ + v * 16), inv));
      }
      transpose16(r);
      for (int j = 0; j < 16 && v * 16 + j < lanes.count; ++j)
        _mm512_storeu_si512(out_row[v * 16 + j] + d0, r[j]);
    }
  }
}

}  // namespace

PAGODA_BF16_TARGET void flash_attention(const AttentionTile& a, float* scratch) {
  const int hd = a.head_dim;
  Lanes lanes;
  lanes.count = a.rows * a.heads;
  lanes.nv = (lanes.count + 15) / 16;
  // Few queries (decode rows): keys across the lanes for the scores,
  // head_dim across the lanes for P . V.
  lanes.by_lane = lanes.count <= kFewQueries;
  for (int i = 0; i < kQ; ++i) {
    const int r = i < lanes.count ? i / a.heads : 0;
    const int64_t l = a.last_key + r;
    const int64_t f = first_visible_key(l, a.sliding_window);
    // Padding lanes see nothing (first > last): their outputs are never read.
    lanes.first_key[i] = i < lanes.count ? static_cast<int32_t>(f) : 1;
    lanes.last_key[i] = i < lanes.count ? static_cast<int32_t>(l) : 0;
  }
  // kv head j of the tile: its q heads after kv head j - 1's, its K/V rows
  // block_size x head_dim elements on, its own scratch.
  PAGODA_CHECK(
      a.kv_heads >= 1 && a.kv_heads <= kMaxFlashKvHeads && (a.kv_heads == 1 || lanes.by_lane),
      "flash attention: {} kv heads per tile of {} queries each", a.kv_heads, lanes.count);
  AttentionTile tiles[kMaxFlashKvHeads];
  Scratch st[kMaxFlashKvHeads];
  for (int j = 0; j < a.kv_heads; ++j) {
    const int64_t head_off = int64_t{j} * a.heads * hd, row_off = int64_t{j} * a.block_size * hd;
    tiles[j] = a;
    tiles[j].q = a.q + head_off;
    tiles[j].out = a.out + head_off;
    tiles[j].k_head = static_cast<const uint16_t*>(a.k_head) + row_off;
    tiles[j].v_head = static_cast<const uint16_t*>(a.v_head) + row_off;
    st[j] = scratch_at(scratch + j * flash_scratch_floats(hd), hd);
    start_tile(tiles[j], lanes, st[j]);
  }
  switch (lanes.nv) {
    case 1:
      attend_blocks<1>(tiles, st, a.kv_heads, lanes);
      break;
    case 2:
      attend_blocks<2>(tiles, st, a.kv_heads, lanes);
      break;
    case 3:
      attend_blocks<3>(tiles, st, a.kv_heads, lanes);
      break;
    default:
      attend_blocks<4>(tiles, st, a.kv_heads, lanes);
      break;
  }
  for (int j = 0; j < a.kv_heads; ++j) finish_tile(tiles[j], lanes, st[j]);
}

}  // namespace pagoda::ops::cpu::avx512bf16_impl
