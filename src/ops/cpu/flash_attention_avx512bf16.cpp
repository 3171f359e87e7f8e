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
// the lanes (value_lane): fewer instructions than one lane per query while
// count x head_dim / 16 < head_dim.
constexpr int kFewQueries = cpu::kFlashFewQueries;

// The tile's scratch (cpu::flash_scratch_floats), 64-byte aligned pieces.
struct Scratch {
  uint32_t* qp;  // [hd / 2][kQ]: q pairs
  float* o;      // unnormalised output: [hd][kQ] (transposed), or [kQ][hd] by_lane
  float* s;      // [kKeys][kQ]: scores, then weights
  uint32_t* pp;  // [kPairs][kQ]: weight pairs
  uint32_t* vp;  // [kPairs][hd]: V rows interleaved by key pairs
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

// The same sums with head_dim across the lanes, for tiles of few queries
// (decode: a GQA group's heads of one row): O[i][d0, d0 + 16 DV) += P . V
// for query i. Each lane does what value_rows does for (d, i) (one dp per
// key pair, pairs in order, the same operands), so the bits are the same;
// only the instruction count falls from hd to count x hd / 16 per pair.
template <int DV>
PAGODA_BF16_TARGET inline void value_lane(const uint32_t* pp, const uint32_t* vp, int hd, int pairs,
                                          float* o_lane, int i, int d0) {
  __m512 acc[DV];
#pragma GCC unroll 8
  for (int c = 0; c < DV; ++c) acc[c] = _mm512_load_ps(o_lane + d0 + 16 * c);
  for (int p = 0; p < pairs; ++p) {
    const __m512i pb = _mm512_set1_epi32(static_cast<int32_t>(pp[p * kQ + i]));
#pragma GCC unroll 8
    for (int c = 0; c < DV; ++c)
      acc[c] = dot(acc[c], pb, _mm512_loadu_si512(vp + p * hd + d0 + 16 * c));
  }
#pragma GCC unroll 8
  for (int c = 0; c < DV; ++c) _mm512_store_ps(o_lane + d0 + 16 * c, acc[c]);
}

// Rows j and j + 1 of 32 bf16 values each, interleaved: element 2i of the
// first result is a[i], 2i + 1 is b[i] (i < 16); the second holds i >= 16.
PAGODA_BF16_TARGET inline void interleave_rows(const uint16_t* a, const uint16_t* b,
                                               uint32_t* out) {
  alignas(64) static const uint16_t kLo[32] = {0,  32, 1,  33, 2,  34, 3,  35, 4,  36, 5,
                                               37, 6,  38, 7,  39, 8,  40, 9,  41, 10, 42,
                                               11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  const __m512i lo = _mm512_load_si512(kLo);
  const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
  const __m512i va = _mm512_loadu_si512(a), vb = _mm512_loadu_si512(b);
  _mm512_storeu_si512(out, _mm512_permutex2var_epi16(va, lo, vb));
  _mm512_storeu_si512(out + 16, _mm512_permutex2var_epi16(va, hi, vb));
}

// The tile's query lanes: lane i = row i / heads, q head i % heads.
struct Lanes {
  int count;                              // rows * heads
  int nv;                                 // query vectors, ceil(count / 16)
  bool by_lane;                           // output as [kQ][hd] (value_lane)
  __m512i first[kQ / 16], last[kQ / 16];  // visible keys per lane
};

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
  auto row_of = [&](int64_t t) {
    return int64_t{a.block_table[t / a.block_size]} * a.block_stride + (t % a.block_size) * hd;
  };
  for (int64_t t0 = first_key / kKeys * kKeys; t0 <= last_tile_key; t0 += kKeys) {
    for (int h = 0; h < kv_heads; ++h) {
      const Scratch& st = scratches[h];
      const auto* kc = static_cast<const uint16_t*>(tiles[h].k_head);
      const auto* vc = static_cast<const uint16_t*>(tiles[h].v_head);
      // From an even key: weights pair keys (2i, 2i + 1) whatever the tile's
      // first key (the pairing sets the rounding of p . v).
      const int64_t even_first = first_key & ~int64_t{1};
      const int64_t lo = t0 > even_first ? t0 : even_first;
      const int64_t hi = t0 + kKeys - 1 < last_tile_key ? t0 + kKeys - 1 : last_tile_key;
      const int count = static_cast<int>(hi - lo + 1);  // keys [lo, hi] of the block
      const int padded = (count + 1) / 2 * 2;
      // Key rows; a padding key repeats the last one (its weight is 0).
      const uint16_t* k[kKeys + 8];
      const uint16_t* v[kKeys];
      for (int j = 0; j < padded; ++j) {
        const int64_t off = row_of(lo + (j < count ? j : count - 1));
        k[j] = kc + off;
        v[j] = vc + off;
      }
      for (int j = padded; j < kKeys + 8; ++j) k[j] = k[padded - 1];
      // Scores, 4 keys x NV query vectors at a time (16 accumulators),
      // asking meanwhile for the K and V rows of the next block (into L2):
      // blocks lie anywhere in the pool, beyond the hardware prefetcher's
      // reach, and a long context's K/V do not stay in L2 between tiles.
      // At the tile's last block: the first block of the tile the thread
      // runs next (a decode tile has only a few blocks; each would start on
      // cold misses).
      const bool to_next_tile = t0 + kKeys > last_tile_key;
      const cpu::AttentionTile* pt = to_next_tile ? a.next : &a;
      int64_t next = t0 + kKeys, next_end = last_tile_key;
      const uint16_t *pkc = kc, *pvc = vc;
      if (to_next_tile && pt != nullptr) {
        // From the key the next tile visits first, up to the end of its
        // grid block (its visible keys only: the blocks before a sliding
        // window's may be released).
        next = first_key_of(*pt) & ~int64_t{1};
        next_end = pt->last_key + pt->rows - 1;
        if (next / kKeys * kKeys + kKeys - 1 < next_end)
          next_end = next / kKeys * kKeys + kKeys - 1;
        const int64_t head = h < pt->kv_heads ? int64_t{h} * pt->block_size * hd : 0;
        pkc = static_cast<const uint16_t*>(pt->k_head) + head;
        pvc = static_cast<const uint16_t*>(pt->v_head) + head;
      }
      if (next + kKeys - 1 < next_end) next_end = next + kKeys - 1;
      // Spread over the score calls however few keys this block has.
      const int per_call = (kKeys + (padded + 3) / 4 - 1) / ((padded + 3) / 4);
      for (int j = 0; j < padded; j += 4) {
        const int64_t from = next + j / 4 * per_call;
        for (int64_t t = from; pt != nullptr && t <= next_end && t < from + per_call; ++t) {
          const int64_t off = int64_t{pt->block_table[t / pt->block_size]} * pt->block_stride +
                              (t % pt->block_size) * hd;
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
        __mmask16 vis[kKeys];
        __m512 mx = _mm512_load_ps(st.m + vi * 16);
        const __m512 old = mx;
        for (int j = 0; j < padded; ++j) {
          const __m512i key = _mm512_set1_epi32(static_cast<int32_t>(lo + j));
          vis[j] = masked ? static_cast<__mmask16>(_mm512_cmple_epi32_mask(lanes.first[vi], key) &
                                                   _mm512_cmple_epi32_mask(key, lanes.last[vi]) &
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
          if (lanes.by_lane) {
            alignas(64) float c16[16];
            _mm512_store_ps(c16, corr);
            for (int i = 0; i < lanes.count; ++i) {
              const __m512 ci = _mm512_set1_ps(c16[i]);
              for (int d = 0; d < hd; d += 16) {
                float* od = st.o + i * hd + d;
                _mm512_store_ps(od, _mm512_mul_ps(_mm512_load_ps(od), ci));
              }
            }
          } else {
            for (int d = 0; d < hd; ++d) {
              float* od = st.o + d * kQ + vi * 16;
              _mm512_store_ps(od, _mm512_mul_ps(_mm512_load_ps(od), corr));
            }
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
        for (int d = 0; d < hd; d += 32)
          interleave_rows(v[2 * p] + d, v[2 * p + 1] + d, st.vp + p * hd + d);
      }
      if (lanes.by_lane) {
        for (int i = 0; i < lanes.count; ++i) {
          for (int d = 0; d < hd; d += 128) {
            if (hd - d >= 128) {
              value_lane<8>(st.pp, st.vp, hd, np, st.o + i * hd, i, d);
            } else {
              for (int dd = d; dd < hd; dd += 32)
                value_lane<2>(st.pp, st.vp, hd, np, st.o + i * hd, i, dd);
            }
          }
        }
      } else {
        for (int d = 0; d < hd; d += 4) value_rows<NV, 4>(st.pp, st.vp, hd, np, st.o, d);
      }
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

// q pairs (rounded to bf16, padding lanes 0) in the vectors the tile reads,
// the output zeroed there, the running max and denominator reset.
PAGODA_BF16_TARGET void start_tile(const AttentionTile& a, const Lanes& lanes, const Scratch& st) {
  const int hd = a.head_dim, pairs = hd / 2;
  // A decode tile fills 16 lanes, not kQ.
  const int lanes_read = lanes.nv * 16;
  for (int i = 0; i < lanes_read; ++i) {
    const float* q =
        i < lanes.count ? a.q + (i / a.heads) * a.q_row_stride + (i % a.heads) * hd : nullptr;
    for (int p = 0; p < pairs; ++p) {
      st.qp[p * kQ + i] =
          q ? uint32_t{f32_to_bf16(q[2 * p])} | uint32_t{f32_to_bf16(q[2 * p + 1])} << 16 : 0;
    }
  }
  if (lanes.by_lane) {
    for (int i = 0; i < lanes.count * hd; ++i) st.o[i] = 0.0f;
  } else {
    for (int d = 0; d < hd; ++d) {
      for (int i = 0; i < lanes_read; ++i) st.o[d * kQ + i] = 0.0f;
    }
  }
  for (int i = 0; i < kQ; ++i) st.m[i] = kNoMax, st.l[i] = 0.0f;
}

PAGODA_BF16_TARGET void finish_tile(const AttentionTile& a, const Lanes& lanes, const Scratch& st) {
  const int hd = a.head_dim;
  for (int i = 0; i < lanes.count; ++i) {
    float* out = a.out + (i / a.heads) * a.q_row_stride + (i % a.heads) * hd;
    const float inv = 1.0f / st.l[i];
    if (lanes.by_lane) {
      for (int d = 0; d < hd; ++d) out[d] = st.o[i * hd + d] * inv;
    } else {
      for (int d = 0; d < hd; ++d) out[d] = st.o[d * kQ + i] * inv;
    }
  }
}

}  // namespace

PAGODA_BF16_TARGET void flash_attention(const AttentionTile& a, float* scratch) {
  const int hd = a.head_dim;
  Lanes lanes;
  lanes.count = a.rows * a.heads;
  lanes.nv = (lanes.count + 15) / 16;
  // Few queries (decode rows): head_dim across the lanes for P . V.
  lanes.by_lane = lanes.count <= kFewQueries;
  alignas(64) int32_t first[kQ], last[kQ];
  for (int i = 0; i < kQ; ++i) {
    const int r = i < lanes.count ? i / a.heads : 0;
    const int64_t l = a.last_key + r;
    const int64_t f = first_visible_key(l, a.sliding_window);
    // Padding lanes see nothing (first > last): their outputs are never read.
    first[i] = i < lanes.count ? static_cast<int32_t>(f) : 1;
    last[i] = i < lanes.count ? static_cast<int32_t>(l) : 0;
  }
  for (int v = 0; v < kQ / 16; ++v) {
    lanes.first[v] = _mm512_load_si512(first + v * 16);
    lanes.last[v] = _mm512_load_si512(last + v * 16);
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
