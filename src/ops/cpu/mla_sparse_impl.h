// Sparse MLA attention (DeepSeek V3.2 DSA) for one ISA: one query token's
// heads over an explicit list of cache slots. Included by kernels_impl.h
// after mla_impl.h, whose inner loop (mla_chunk: scores, online softmax,
// P.V over a chunk of entry pointers) and segment merge it reuses, so the
// arithmetic per chunk is the dense kernel's.
//
// Order: the list's valid slots are visited in list order, kKeyChunk at a
// time, in segments of kMlaSegmentKeys valid entries, each segment's state
// merged into the total in order from the empty state, exactly as
// mla_attention visits a single row's keys 0..last. A (token, head) result
// is therefore a function of its q and its list only (never of the batch,
// the head block or the threads), and the causal set in position order
// reproduces the dense row bit for bit. A different order of the same set
// changes the result only by f32 reassociation.
#ifndef PAGODA_ISA
#error "included by kernels_impl.h"
#endif

// Gathers from list[*i...] up to kKeyChunk entries of valid (>= 0) slots,
// advancing *i past them and the invalid slots between; returns the count.
template <typename KV>
PAGODA_TARGET inline int mla_sparse_gather(const cpu::MlaSparseTile& a, int* i, const KV** e) {
  int count = 0;
  while (*i < a.count && count < kKeyChunk) {
    const int32_t slot = a.slots[(*i)++];
    if (slot >= 0) e[count++] = static_cast<const KV*>(a.cache) + int64_t{slot} * a.entry_stride;
  }
  return count;
}

template <typename KV>
PAGODA_TARGET void mla_sparse_attention(const cpu::MlaSparseTile& a, float* scratch) {
  const int dv = a.kv_lora, nq = a.heads;
  // Scratch as mla_attention lays it out: the segment's state, then the total's.
  MlaState st;
  st.acc = scratch;
  st.scores = st.acc + int64_t{nq} * dv;
  st.running_max = st.scores + nq * kKeyChunk;
  st.denom = st.running_max + nq;
  float* total_acc = st.denom + nq;
  float* total_max = total_acc + int64_t{nq} * dv;
  float* total_denom = total_max + nq;
  for (int64_t i = 0; i < int64_t{nq} * dv; ++i) total_acc[i] = 0.0f;
  for (int i = 0; i < nq; ++i) total_max[i] = -__builtin_inff(), total_denom[i] = 0.0f;
  const int64_t entry_bytes = a.entry_stride * int64_t{sizeof(KV)};
  float* dequant = scratch + cpu::mla_scratch_floats(dv);  // fp8 only
  const KV* e[kKeyChunk];
  const KV* ahead[kKeyChunk];
  int next = 0;  // list position of the next chunk
  int count = mla_sparse_gather<KV>(a, &next, e);
  while (count > 0) {  // one segment per pass
    for (int64_t i = 0; i < int64_t{nq} * dv; ++i) st.acc[i] = 0.0f;
    for (int i = 0; i < nq; ++i) st.running_max[i] = -__builtin_inff(), st.denom[i] = 0.0f;
    for (int64_t seg_keys = 0; count > 0 && seg_keys < cpu::kMlaSegmentKeys;) {
      // The next chunk's entries lie anywhere in the pool: ask for them now,
      // while this chunk's arithmetic hides their latency.
      int after = next;
      const int ahead_count = mla_sparse_gather<KV>(a, &after, ahead);
      for (int j = 0; j < ahead_count; ++j) {
        const char* row = reinterpret_cast<const char*>(ahead[j]);
        for (int64_t b = 0; b < entry_bytes; b += 64) __builtin_prefetch(row + b, 0, 3);
      }
      ActiveQueries& act = st.act;
      act.count = nq;
      for (int h = 0; h < nq; ++h) {
        act.index[h] = h;
        act.q[h] = a.q + h * a.q_head_stride;
        act.s[h] = st.scores + h * kKeyChunk;
        act.acc[h] = st.acc + int64_t{h} * dv;
        act.lo[h] = 0;
        act.hi[h] = count - 1;
      }
      mla_chunk_any<KV>(e, count, dv, a.entry_dim, a.scale, st, dequant);
      seg_keys += count;
      for (int j = 0; j < ahead_count; ++j) e[j] = ahead[j];
      count = ahead_count;
      next = after;
    }
    for (int h = 0; h < nq; ++h) {
      mla_merge_state(total_max[h], total_denom[h], total_acc + int64_t{h} * dv,
                      st.running_max[h], st.denom[h], st.acc + int64_t{h} * dv, dv);
    }
  }
  for (int h = 0; h < nq; ++h) {
    float* o = a.out + h * a.out_head_stride;
    if (total_denom[h] > 0.0f) {
      scale(total_acc + int64_t{h} * dv, 1.0f / total_denom[h], o, dv);
    } else {  // an empty list: no keys, a zero output (not 0/0)
      for (int d = 0; d < dv; ++d) o[d] = 0.0f;
    }
  }
}
