// DeepSeek V4 sparse attention with an attention sink (ops.h
// v4_sparse_attention) for one ISA: one query token's heads over its window
// and compressed entry lists. Included by kernels_impl.h after mla_impl.h:
// V4 attention is MQA with K = V = the whole entry, i.e. MLA's absorbed
// form with kv_lora = entry_dim = head_dim, so each chunk runs mla_chunk
// (scores, online softmax, P.V; every head of the tile reads the chunk's
// entries once from memory, then from L1).
//
// Order (kernels.h V4AttentionTile): the lists' positions, window first,
// in segments of kV4SegmentSlots; a segment's chunks take up to kKeyChunk
// valid entries of one list in list order; segment states fold in order
// (empty ones skipped), then the sink. Every step depends only on the
// token's q, lists and caches, so neither the head block nor the thread
// split changes a bit.
#ifndef PAGODA_ISA
#error "included by kernels_impl.h"
#endif

// Up to kKeyChunk valid entries from list positions [*pos, end) of one
// source (a chunk never mixes the two caches' formats), advancing *pos past
// them and the -1s between. body: each entry's first byte (fp8: its body);
// scales: fp8 only, its UE8M0 trailer. Returns the count, the source in
// *which.
PAGODA_TARGET inline int v4_gather(const cpu::V4AttentionTile& a, int* pos, int end, int* which,
                                   const char** body, const uint8_t** scales) {
  int count = 0;
  while (*pos < end && count < kKeyChunk) {
    const int s = *pos < a.src[0].count ? 0 : 1;
    if (count > 0 && s != *which) break;
    const cpu::V4AttentionSource& src = a.src[s];
    const int32_t slot = src.slots[s == 0 ? *pos : *pos - a.src[0].count];
    ++*pos;
    if (slot < 0) continue;
    *which = s;
    const char* base = static_cast<const char*>(src.cache);
    body[count] = base + src.layout->entry_offset(slot);
    if (src.layout->dtype == DType::F8E4M3)
      scales[count] = reinterpret_cast<const uint8_t*>(base + src.layout->fp8_scales_offset(slot));
    ++count;
  }
  return count;
}

// V4 fp8 entries (ops.h V4EntryLayout F8E4M3) as bf16 rows of head_dim in
// `out`. vload_e4m3 gives value / 256 exactly; * 256 and * 2^k are exact
// too (two products: 2^(k + 8) alone overflows f32 for the largest
// scales), so a value is f8e4m3_to_f32(byte) * 2^k, read_v4_entry's: 3
// mantissa bits, which bf16 holds exactly, so bf16 rows lose nothing and
// halve the chunk's bytes (a 16-entry chunk of 512-dim rows stays in L1,
// as the bf16 cache's does: ~20% faster than f32 rows), and mla_chunk
// widens them back to the same f32s. The rope part is copied as is.
PAGODA_TARGET inline void v4_dequant_fp8(const char* const* body, const uint8_t* const* scales,
                                         int count, const V4EntryLayout& layout, uint16_t* out,
                                         const uint16_t** rows) {
  const int nope = layout.nope_dim(), rope = layout.rope_dim, dv = layout.head_dim;
  const Vec k256 = vset1(256.0f);
  for (int j = 0; j < count; ++j) {
    uint16_t* dst = out + int64_t{j} * dv;
    const auto* b = reinterpret_cast<const uint8_t*>(body[j]);
    for (int g = 0, d0 = 0; d0 < nope; ++g, d0 += kV4Fp8Group) {
      const int d1 = d0 + kV4Fp8Group < nope ? d0 + kV4Fp8Group : nope;
      const Vec vs = vset1(f8e8m0_to_f32(scales[j][g]));
      int d = d0;
      for (; d + kLanes <= d1; d += kLanes)
        vstore_bf16_exact(dst + d, vmul(vmul(vload_e4m3(b + d), k256), vs));
      if (d < d1) {
        const int t = d1 - d;
        vstore_bf16_exact_tail(dst + d, vmul(vmul(vload_e4m3_tail(b + d, t), k256), vs), t);
      }
    }
    std::memcpy(dst + nope, b + nope, sizeof(uint16_t) * static_cast<size_t>(rope));
    rows[j] = dst;
  }
}

// Folds a segment's state into a total, both rescaled to the larger max
// (mla_merge_state's rule), unless the segment held only padding (l = 0:
// its max is -inf, which would merge as exp(-inf - -inf) = NaN). The
// scalar a * b + c steps are explicit fmas: left to -ffp-contract, the
// compiler fuses them differently where this is inlined into v4_attention
// and into v4_finish, and the split and unsplit paths would differ in the
// last bit.
PAGODA_TARGET inline void v4_fold(float& M, float& L, float* A, float m, float l, const float* a,
                                  int dv) {
  if (l == 0.0f) return;
  const float mx = m > M ? m : M;
  const float ct = __builtin_expf(M - mx), cs = __builtin_expf(m - mx);
  M = mx;
  L = __builtin_fmaf(l, cs, L * ct);
  const Vec vt = vset1(ct), vs = vset1(cs);
  int d = 0;
  for (; d + kLanes <= dv; d += kLanes)
    vstore(A + d, vfma(vload(a + d), vs, vmul(vload(A + d), vt)));
  if (d < dv) {
    const int t = dv - d;
    vstore_tail(A + d, vfma(vload_tail(a + d, t), vs, vmul(vload_tail(A + d, t), vt)), t);
  }
}

// The normalised output with the sink's exp(sink - M') in the denominator
// (M' = max(M, sink)). No entries: zeros, with or without a finite sink.
PAGODA_TARGET inline void v4_sink_out(float M, float L, const float* A, float sink, int dv,
                                      float* out) {
  if (L == 0.0f) {
    for (int d = 0; d < dv; ++d) out[d] = 0.0f;
    return;
  }
  const float mx = M > sink ? M : sink;
  const float c = __builtin_expf(M - mx);
  const float denom = __builtin_fmaf(L, c, __builtin_expf(sink - mx));  // fused: see v4_fold
  scale(A, c / denom, out, dv);
}

PAGODA_TARGET void v4_attention(const cpu::V4AttentionTile& a, float* scratch) {
  const int dv = a.head_dim, nq = a.heads;
  MlaState st;  // the current segment's state, laid out as mla_attention's
  st.acc = scratch;
  st.scores = st.acc + int64_t{nq} * dv;
  st.running_max = st.scores + nq * kKeyChunk;
  st.denom = st.running_max + nq;
  float* total_acc = st.denom + nq;
  float* total_max = total_acc + int64_t{nq} * dv;
  float* total_denom = total_max + nq;
  float* dequant = scratch + cpu::mla_scratch_floats(dv);  // fp8 chunks
  for (int64_t i = 0; i < int64_t{nq} * dv; ++i) total_acc[i] = 0.0f;
  for (int i = 0; i < nq; ++i) total_max[i] = -__builtin_inff(), total_denom[i] = 0.0f;
  const int positions = a.src[0].count + a.src[1].count;
  const char* body[kKeyChunk];
  const uint8_t* sc[kKeyChunk];
  const char* ahead_body[kKeyChunk];
  const uint8_t* ahead_sc[kKeyChunk];
  for (int seg = a.seg_begin; seg < a.seg_end; ++seg) {
    const int seg_end = (seg + 1) * int64_t{cpu::kV4SegmentSlots} < positions
                            ? (seg + 1) * cpu::kV4SegmentSlots
                            : positions;
    for (int64_t i = 0; i < int64_t{nq} * dv; ++i) st.acc[i] = 0.0f;
    for (int i = 0; i < nq; ++i) st.running_max[i] = -__builtin_inff(), st.denom[i] = 0.0f;
    int pos = seg * cpu::kV4SegmentSlots, which = 0;
    int count = v4_gather(a, &pos, seg_end, &which, body, sc);
    while (count > 0) {
      // The next chunk's entries lie anywhere in the pool: ask for them
      // now, while this chunk's arithmetic hides their latency.
      int after = pos, ahead_which = 0;
      const int ahead_count = v4_gather(a, &after, seg_end, &ahead_which, ahead_body, ahead_sc);
      if (ahead_count > 0) {
        const V4EntryLayout& la = *a.src[ahead_which].layout;
        const bool fp8 = la.dtype == DType::F8E4M3;
        const int64_t bytes = fp8 ? la.fp8_body_bytes() : la.entry_bytes();
        for (int j = 0; j < ahead_count; ++j) {
          for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(ahead_body[j] + b, 0, 3);
          if (fp8) __builtin_prefetch(ahead_sc[j], 0, 3);
        }
      }
      ActiveQueries& act = st.act;
      act.count = nq;
      for (int h = 0; h < nq; ++h) {
        act.index[h] = h;
        act.q[h] = a.q + int64_t{h} * dv;
        act.s[h] = st.scores + h * kKeyChunk;
        act.acc[h] = st.acc + int64_t{h} * dv;
        act.lo[h] = 0;
        act.hi[h] = count - 1;
      }
      const V4EntryLayout& layout = *a.src[which].layout;
      if (layout.dtype == DType::F8E4M3) {
        const uint16_t* rows[kKeyChunk];
        v4_dequant_fp8(body, sc, count, layout, reinterpret_cast<uint16_t*>(dequant), rows);
        mla_chunk<uint16_t>(rows, count, dv, dv, a.scale, st);
      } else if (layout.dtype == DType::BF16) {
        const uint16_t* rows[kKeyChunk];
        for (int j = 0; j < count; ++j) rows[j] = reinterpret_cast<const uint16_t*>(body[j]);
        mla_chunk<uint16_t>(rows, count, dv, dv, a.scale, st);
      } else {
        const float* rows[kKeyChunk];
        for (int j = 0; j < count; ++j) rows[j] = reinterpret_cast<const float*>(body[j]);
        mla_chunk<float>(rows, count, dv, dv, a.scale, st);
      }
      for (int j = 0; j < ahead_count; ++j) body[j] = ahead_body[j], sc[j] = ahead_sc[j];
      count = ahead_count;
      which = ahead_which;
      pos = after;
    }
    for (int h = 0; h < nq; ++h) {
      const float* acc = st.acc + int64_t{h} * dv;
      if (a.partial) {
        float* p = a.partial + h * a.partial_head_stride;
        p[0] = st.running_max[h];
        p[1] = st.denom[h];
        for (int d = 0; d < dv; ++d) p[2 + d] = acc[d];
      } else {
        v4_fold(total_max[h], total_denom[h], total_acc + int64_t{h} * dv, st.running_max[h],
                st.denom[h], acc, dv);
      }
    }
  }
  if (a.partial) return;
  for (int h = 0; h < nq; ++h) {
    v4_sink_out(total_max[h], total_denom[h], total_acc + int64_t{h} * dv, a.sink[h], dv,
                a.out + int64_t{h} * dv);
  }
}

// Segment states one after another, folded from the empty state exactly as
// v4_attention folds them; `out` doubles as the accumulator.
PAGODA_TARGET void v4_finish(const float* states, int count, int dv, float sink, float* out) {
  float M = -__builtin_inff(), L = 0.0f;
  for (int d = 0; d < dv; ++d) out[d] = 0.0f;
  for (int s = 0; s < count; ++s) {
    const float* p = states + int64_t{s} * (dv + 2);
    v4_fold(M, L, out, p[0], p[1], p + 2, dv);
  }
  v4_sink_out(M, L, out, sink, dv, out);
}
