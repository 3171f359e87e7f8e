// MLA attention in the absorbed (MQA) form over a paged latent cache, for
// one ISA: included by kernels_impl.h inside its namespace, so it reuses
// that file's score_block, softmax_chunk, scale and ActiveQueries.
//
// Every query head reads the same entry per key, so a tile takes up to
// kMaxTileQueries (row, head) queries and reads each entry once for all of
// them: from memory once per tile, then from L1 for every query (with 128
// heads, decode is bound by arithmetic, ~2 x 1.1 K flops per head and key,
// not by the 1152 bytes of a bf16 entry).
//
// Determinism: as in the dense kernel, a query's keys are visited in fixed
// chunks (the kKeyChunk grid of each block), and each chunk's scores,
// online-softmax step and P.V are one instruction sequence per query that
// depends only on the query and the chunk's entries; keys a query does not
// see get weight 0 and add exact zeros. So a (token, head) output does not
// depend on its tile, the batch or the thread split.
#ifndef PAGODA_ISA
#error "included by kernels_impl.h"
#endif

// acc_i[d0, d0 + NV * kLanes) += sum_j p_i[j] e_j[d0...] over the chunk's
// entries j in order; TAIL: the last t < kLanes lanes instead (NV = 1).
// Entries come as pointers, so a chunk may be any set of slots (a sparse
// "attend to these slots" list fills the same array).
template <int NQ, int NV, bool TAIL = false, typename KV>
PAGODA_TARGET inline void mla_value_block(const float* const* p, const KV* const* e, int count,
                                          float* const* acc, int d0, int t = kLanes) {
  Vec a[NQ][NV];
#pragma GCC unroll 4
  for (int i = 0; i < NQ; ++i) {
#pragma GCC unroll 4
    for (int c = 0; c < NV; ++c)
      a[i][c] = TAIL ? vload_tail(acc[i] + d0, t) : vload(acc[i] + d0 + c * kLanes);
  }
  for (int j = 0; j < count; ++j) {
    const KV* ej = e[j] + d0;
    Vec vv[NV];
#pragma GCC unroll 4
    for (int c = 0; c < NV; ++c) vv[c] = TAIL ? vload_tail(ej, t) : vload(ej + c * kLanes);
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
PAGODA_TARGET inline void mla_value_rows(const float* const* p, const KV* const* e, int count,
                                         float* const* acc, int dv) {
  int d = 0;
  for (; d + kValueVecs * kLanes <= dv; d += kValueVecs * kLanes)
    mla_value_block<NQ, kValueVecs>(p, e, count, acc, d);
  for (; d + kLanes <= dv; d += kLanes) mla_value_block<NQ, 1>(p, e, count, acc, d);
  if (d < dv) mla_value_block<NQ, 1, true>(p, e, count, acc, d, dv - d);
}

// A tile's running state, per query: latent accumulator, one chunk's
// scores (then weights), running max, softmax denominator.
struct MlaState {
  float* acc;          // [nq][kv_lora]
  float* scores;       // [nq][kKeyChunk]
  float* running_max;  // [nq]
  float* denom;        // [nq]
  ActiveQueries act;   // the queries that see the current chunk
};

// The inner loop: the active queries (st.act, with each query's visible
// range lo..hi of the chunk) over `count` (<= kKeyChunk) entries e: scores
// over entry_dim, online softmax, P.V over the first kv_lora values.
template <typename KV>
PAGODA_TARGET inline void mla_chunk(const KV* const* e, int count, int kv_lora, int entry_dim,
                                    float scale, MlaState& st) {
  ActiveQueries& act = st.act;
  // Scores, 4 entries at a time (past the chunk's end: its last entry again).
  for (int c0 = 0; c0 < count; c0 += 4) {
    const KV* k[4];
    for (int c = 0; c < 4; ++c) k[c] = e[c0 + c < count ? c0 + c : count - 1];
    int i = 0;
    for (; i + kScoreQueries <= act.count; i += kScoreQueries)
      score_block<kScoreQueries>(act.q + i, k, entry_dim, scale, act.s + i, c0);
    for (; i + 2 <= act.count; i += 2)
      score_block<2>(act.q + i, k, entry_dim, scale, act.s + i, c0);
    for (; i < act.count; ++i) score_block<1>(act.q + i, k, entry_dim, scale, act.s + i, c0);
  }
  for (int n = 0; n < act.count; ++n) {
    const int i = act.index[n];
    softmax_chunk(act.s[n], count, act.lo[n], act.hi[n], act.acc[n], kv_lora, st.running_max[i],
                  st.denom[i]);
  }
  int n = 0;
  const float* const* p = act.s;
  for (; n + kValueQueries <= act.count; n += kValueQueries)
    mla_value_rows<kValueQueries>(p + n, e, count, act.acc + n, kv_lora);
  for (; n + 2 <= act.count; n += 2) mla_value_rows<2>(p + n, e, count, act.acc + n, kv_lora);
  for (; n < act.count; ++n) mla_value_rows<1>(p + n, e, count, act.acc + n, kv_lora);
}

// The chunk of tile keys starting at key t: up to the end of t's kKeyChunk
// grid cell in its block and at most to key `last`. Returns its length and
// fills e with its entries (adjacent in the block).
template <typename KV>
PAGODA_TARGET inline int mla_locate_chunk(const cpu::MlaTile& a, int64_t t, int64_t last,
                                          const KV** e) {
  const int64_t offset = t % a.block_size;
  const int64_t cell_end = offset / kKeyChunk * kKeyChunk + kKeyChunk;
  int64_t rows = (cell_end < a.block_size ? cell_end : a.block_size) - offset;
  if (rows > last - t + 1) rows = last - t + 1;
  const KV* first =
      static_cast<const KV*>(a.cache) +
      (int64_t{a.block_table[t / a.block_size]} * a.block_size + offset) * a.entry_stride;
  for (int j = 0; j < rows; ++j) e[j] = first + int64_t{j} * a.entry_stride;
  return static_cast<int>(rows);
}

// (M, L, A) = the merge of softmax states (M, L, A) and (m, l, a): both
// rescaled to the larger max. The empty state is (-inf, 0, zeros), which
// any state merges into exactly (0 * 0 + a * 1). The one merge both the
// whole-range kernel and mla_merge use, so they give the same bits.
PAGODA_TARGET inline void mla_merge_state(float& M, float& L, float* A, float m, float l,
                                          const float* a, int dv) {
  const float mx = m > M ? m : M;
  const float ct = __builtin_expf(M - mx), cs = __builtin_expf(m - mx);
  M = mx;
  L = L * ct + l * cs;
  const Vec vt = vset1(ct), vs = vset1(cs);
  int d = 0;
  for (; d + kLanes <= dv; d += kLanes)
    vstore(A + d, vfma(vload(a + d), vs, vmul(vload(A + d), vt)));
  if (d < dv) {
    const int t = dv - d;
    vstore_tail(A + d, vfma(vload_tail(a + d, t), vs, vmul(vload_tail(A + d, t), vt)), t);
  }
}

// fp8_ds_mla entries (ops.h MLALayout F8E4M3) as f32 rows of entry_dim in
// `out`: latent = e4m3 value * its group's scale (one f32 product, the
// value ops.h defines), k_pe widened from bf16 exactly. vload_e4m3 gives
// value / 256 (exact), and scale * 256 is exact (scale <= FLT_MAX / 448),
// so their product is the same real number as value * scale, rounded once:
// the same bits as f8e4m3_to_f32(byte) * scale.
PAGODA_TARGET inline void mla_dequant_fp8(const uint8_t* const* e, int count, int kv_lora,
                                          int entry_dim, float* out, const float** rows) {
  const int groups = kv_lora / kMlaFp8Group, rope = entry_dim - kv_lora;
  for (int j = 0; j < count; ++j) {
    float* dst = out + int64_t{j} * entry_dim;
    const uint8_t* src = e[j];
    for (int g = 0; g < groups; ++g) {
      float sc;
      __builtin_memcpy(&sc, src + kv_lora + 4 * g, sizeof(float));
      const Vec vs = vset1(sc * 256.0f);
      for (int d = g * kMlaFp8Group; d < (g + 1) * kMlaFp8Group; d += kLanes)
        vstore(dst + d, vmul(vload_e4m3(src + d), vs));
    }
    const auto* pe = reinterpret_cast<const uint16_t*>(src + kv_lora + 4 * groups);
    int d = 0;
    for (; d + kLanes <= rope; d += kLanes) vstore(dst + kv_lora + d, vload(pe + d));
    if (d < rope) vstore_tail(dst + kv_lora + d, vload_tail(pe + d, rope - d), rope - d);
    rows[j] = dst;
  }
}

// mla_chunk over entries of any cache format: f32 / bf16 directly, fp8
// (KV = uint8_t) through `dequant` (kKeyChunk * entry_dim floats).
template <typename KV>
PAGODA_TARGET inline void mla_chunk_any(const KV* const* e, int count, int kv_lora,
                                        int entry_dim, float scale, MlaState& st,
                                        float* dequant) {
  if constexpr (sizeof(KV) == 1) {
    const float* rows[kKeyChunk];
    mla_dequant_fp8(e, count, kv_lora, entry_dim, dequant, rows);
    mla_chunk<float>(rows, count, kv_lora, entry_dim, scale, st);
  } else {
    mla_chunk<KV>(e, count, kv_lora, entry_dim, scale, st);
  }
}

template <typename KV>
PAGODA_TARGET void mla_attention(const cpu::MlaTile& a, float* scratch) {
  const int dv = a.kv_lora, nq = a.rows * a.heads;
  MlaState st;  // the current segment's state
  st.acc = scratch;
  st.scores = st.acc + int64_t{nq} * dv;
  st.running_max = st.scores + nq * kKeyChunk;
  st.denom = st.running_max + nq;
  float* total_acc = st.denom + nq;  // the merged segments' state
  float* total_max = total_acc + int64_t{nq} * dv;
  float* total_denom = total_max + nq;
  for (int64_t i = 0; i < int64_t{nq} * dv; ++i) total_acc[i] = 0.0f;
  for (int i = 0; i < nq; ++i) total_max[i] = -__builtin_inff(), total_denom[i] = 0.0f;
  const int64_t last_tile_key = a.last_key + a.rows - 1;
  const int64_t entry_bytes = a.entry_stride * int64_t{sizeof(KV)};
  float* dequant = scratch + cpu::mla_scratch_floats(dv);  // fp8 only
  const int64_t keys_end =
      a.partial ? a.seg_begin + cpu::kMlaSegmentKeys : last_tile_key + 1;  // exclusive
  const KV* e[kKeyChunk];
  const KV* ahead[kKeyChunk];
  for (int64_t seg = a.seg_begin; seg < keys_end && seg <= last_tile_key;
       seg += cpu::kMlaSegmentKeys) {
    const int64_t seg_end =
        seg + cpu::kMlaSegmentKeys < keys_end ? seg + cpu::kMlaSegmentKeys : keys_end;
    const int64_t seg_last = seg_end - 1 < last_tile_key ? seg_end - 1 : last_tile_key;
    for (int64_t i = 0; i < int64_t{nq} * dv; ++i) st.acc[i] = 0.0f;
    for (int i = 0; i < nq; ++i) st.running_max[i] = -__builtin_inff(), st.denom[i] = 0.0f;
    for (int64_t t = seg; t <= seg_last;) {
      const int count = mla_locate_chunk<KV>(a, t, seg_last, e);
      const int64_t end = t + count;
      // Ask for the next chunk's entries now: a chunk's arithmetic (tens of
      // thousands of cycles for a full tile) hides their latency, and
      // blocks lie anywhere in the pool, where the hardware prefetcher
      // cannot follow.
      const int ahead_count =
          end <= last_tile_key ? mla_locate_chunk<KV>(a, end, last_tile_key, ahead) : 0;
      for (int j = 0; j < ahead_count; ++j) {
        const char* row = reinterpret_cast<const char*>(ahead[j]);
        for (int64_t b = 0; b < entry_bytes; b += 64) __builtin_prefetch(row + b, 0, 3);
      }
      ActiveQueries& act = st.act;
      act.count = 0;
      for (int r = 0; r < a.rows; ++r) {
        const int64_t last = a.last_key + r;
        if (last < t) continue;
        for (int h = 0; h < a.heads; ++h) {
          const int i = r * a.heads + h, n = act.count++;
          act.index[n] = i;
          act.q[n] = a.q + r * a.q_row_stride + h * a.q_head_stride;
          act.s[n] = st.scores + i * kKeyChunk;
          act.acc[n] = st.acc + int64_t{i} * dv;
          act.lo[n] = 0;
          act.hi[n] = static_cast<int>((last < end - 1 ? last : end - 1) - t);
        }
      }
      mla_chunk_any<KV>(e, count, dv, a.entry_dim, a.scale, st, dequant);
      t = end;
    }
    // The segment's state, to the caller or into the total (rows that see
    // none of its keys have none).
    for (int r = 0; r < a.rows; ++r) {
      if (a.last_key + r < seg) continue;
      for (int h = 0; h < a.heads; ++h) {
        const int i = r * a.heads + h;
        const float* acc = st.acc + int64_t{i} * dv;
        if (a.partial) {
          float* p = a.partial + h * a.partial_head_stride;
          p[0] = st.running_max[i];
          p[1] = st.denom[i];
          for (int d = 0; d < dv; ++d) p[2 + d] = acc[d];
        } else {
          mla_merge_state(total_max[i], total_denom[i], total_acc + int64_t{i} * dv,
                          st.running_max[i], st.denom[i], acc, dv);
        }
      }
    }
  }
  if (a.partial) return;
  for (int r = 0; r < a.rows; ++r) {
    for (int h = 0; h < a.heads; ++h) {
      const int i = r * a.heads + h;
      scale(total_acc + int64_t{i} * dv, 1.0f / total_denom[i],
            a.out + r * a.out_row_stride + h * a.out_head_stride, dv);
    }
  }
}

// Segment states (m, l, acc[dv]) one after another, merged in order from
// the empty state and normalised, as the whole-range kernel does; `out`
// doubles as the accumulator.
PAGODA_TARGET void mla_merge(const float* states, int count, int dv, float* out) {
  float M = -__builtin_inff(), L = 0.0f;
  for (int d = 0; d < dv; ++d) out[d] = 0.0f;
  for (int s = 0; s < count; ++s) {
    const float* p = states + int64_t{s} * (dv + 2);
    mla_merge_state(M, L, out, p[0], p[1], p + 2, dv);
  }
  scale(out, 1.0f / L, out, dv);
}
