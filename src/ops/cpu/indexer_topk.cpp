// ops.h indexer_topk: the V3.2 lightning indexer's scores over a paged key
// cache (per-ISA kernel: indexer_impl.h) and a streaming top-k selection.
//
// Selection: keys are visited in increasing position, one cache block at a
// time; a candidate buffer of 2 * topk takes every key until it first
// fills, then only keys scoring strictly above the running threshold (the
// k-th best so far: a later key with an equal score has a higher position,
// so it ranks below it). When the buffer fills it is cut to the best topk
// (nth_element). The order is strict and total (score descending, then
// position ascending), so the result is the unique top-k of the scores,
// whatever the cut points or the key-range split: tokens with few
// companions in the batch split their keys between threads and merge.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/parallel.h"
#include "ops/cpu/kernels.h"
#include "ops/ops.h"

namespace pagoda::ops {
namespace {

struct Candidate {
  float score;
  int32_t pos;
};

inline bool ranks_before(const Candidate& a, const Candidate& b) {
  return a.score > b.score || (a.score == b.score && a.pos < b.pos);
}

// The best k of keys pushed in increasing position, in a caller's buffer of
// 2k candidates (no allocation).
class RunningTopK {
 public:
  RunningTopK(Candidate* buf, int k) : buf_(buf), k_(k) {}
  void push(float score, int32_t pos) {
    if (cut_ && !(score > threshold_)) return;
    buf_[n_++] = {score, pos};
    if (n_ == 2 * k_) cut();
  }
  // Sorts the best min(k, pushed) to the front; returns their count.
  int finish() {
    if (n_ > k_) cut();
    std::sort(buf_, buf_ + n_, ranks_before);
    return n_;
  }

 private:
  void cut() {
    std::nth_element(buf_, buf_ + (k_ - 1), buf_ + n_, ranks_before);
    n_ = k_;
    threshold_ = buf_[k_ - 1].score;
    cut_ = true;
  }
  Candidate* buf_;
  int k_;
  int n_ = 0;
  bool cut_ = false;
  float threshold_ = 0.0f;
};

}  // namespace

void indexer_topk(const float* q, const float* weights, const void* cache,
                  const IndexerLayout& layout, const AttentionBatch& batch, int num_heads,
                  int topk, int32_t* out_slots, int32_t* out_positions,
                  IndexerOrder order) {
  const int bs = layout.block_size, dim = layout.head_dim;
  PAGODA_CHECK(bs > 0 && dim > 0 && num_heads > 0 && topk > 0,
               "indexer_topk: block_size {} head_dim {} heads {} topk {}", bs, dim, num_heads,
               topk);
  PAGODA_CHECK(layout.dtype == DType::F32 || layout.dtype == DType::BF16 ||
                   layout.dtype == DType::F8E4M3,
               "indexer_topk: cache dtype {}", dtype_name(layout.dtype));
  PAGODA_CHECK(batch.sliding_window == 0, "indexer_topk: sliding window {}",
               batch.sliding_window);
  const int32_t* qsl = batch.query_start_loc;
  const int64_t num_tokens = batch.num_seqs > 0 ? qsl[batch.num_seqs] : 0;
  // Grow-only lists (references, so the pool's threads read this thread's).
  thread_local std::vector<int32_t> seq_list;
  thread_local std::vector<Candidate> part_list;
  thread_local std::vector<int32_t> part_count_list;
  std::vector<int32_t>& seq_of = seq_list;
  seq_of.resize(static_cast<size_t>(num_tokens));
  int64_t max_keys = 0;
  for (int s = 0; s < batch.num_seqs; ++s) {
    const int64_t num_new = qsl[s + 1] - qsl[s], len = batch.seq_lens[s];
    PAGODA_CHECK(num_new >= 0 && len >= num_new && (len + bs - 1) / bs <= batch.max_blocks_per_seq,
                 "indexer_topk: sequence {} has {} new of {} keys, {} blocks max", s, num_new,
                 len, batch.max_blocks_per_seq);
    for (int64_t t = qsl[s]; t < qsl[s + 1]; ++t) seq_of[t] = s;
    max_keys = std::max(max_keys, len);
  }
  // Parts per token: 1 when the batch has a token per thread; otherwise a
  // token's blocks split into parts (at least kPartKeys keys each) whose
  // top-k lists merge after.
  constexpr int64_t kPartKeys = 2048;
  const int64_t threads = num_threads();
  int64_t parts = 1;
  if (num_tokens > 0 && num_tokens < threads) {
    parts = std::min((threads + num_tokens - 1) / num_tokens,
                     std::max<int64_t>(1, max_keys / kPartKeys));
  }
  const int hp = (num_heads + cpu::kIndexerHeadPad - 1) / cpu::kIndexerHeadPad *
                 cpu::kIndexerHeadPad;
  if (parts > 1) {
    part_list.resize(static_cast<size_t>(num_tokens * parts * topk));
    part_count_list.resize(static_cast<size_t>(num_tokens * parts));
  }
  Candidate* part_cands = part_list.data();
  int32_t* part_counts = part_count_list.data();
  const cpu::KernelTable& kt = cpu::active_kernels();
  const int64_t page_bytes = layout.page_step();

  // Writes token t's sorted candidates as slots / positions, -1 padded
  // (re-sorted by position for IndexerOrder::Position: c is scratch).
  auto emit = [&](int64_t t, Candidate* c, int n) {
    if (order == IndexerOrder::Position)
      std::sort(c, c + n, [](const Candidate& a, const Candidate& b) { return a.pos < b.pos; });
    const int32_t* table = batch.block_table(seq_of[t]);
    for (int i = 0; i < topk; ++i) {
      const int32_t pos = i < n ? c[i].pos : -1;
      out_slots[t * topk + i] = pos < 0 ? -1 : table[pos / bs] * bs + pos % bs;
      if (out_positions) out_positions[t * topk + i] = pos;
    }
  };

  parallel_for(num_tokens * parts, 1, [&](int64_t i0, int64_t i1) {
    // Per-thread scratch, grown once: the transposed query and padded
    // weights, a converted block, its scores, the candidate buffer.
    thread_local std::vector<float> qt_buf, tile_buf, score_buf;
    thread_local std::vector<Candidate> cand_buf;
    qt_buf.resize(static_cast<size_t>(dim + 1) * hp);
    if (layout.dtype != DType::F32) tile_buf.resize(static_cast<size_t>(bs) * dim);
    score_buf.resize(static_cast<size_t>(bs));
    cand_buf.resize(static_cast<size_t>(2 * topk));
    float* qT = qt_buf.data();
    float* w = qT + int64_t{dim} * hp;
    for (int64_t item = i0; item < i1; ++item) {
      const int64_t t = item / parts, part = item % parts;
      const int s = seq_of[t];
      const int64_t num_new = qsl[s + 1] - qsl[s];
      const int64_t n_keys = batch.seq_lens[s] - num_new + (t - qsl[s]) + 1;
      const int32_t* table = batch.block_table(s);
      const int64_t blocks = (n_keys + bs - 1) / bs;
      const int64_t b0 = blocks * part / parts, b1 = blocks * (part + 1) / parts;
      for (int h = 0; h < hp; ++h) {
        const bool real = h < num_heads;
        const float* qh = q + (t * num_heads + h) * dim;
        for (int d = 0; d < dim; ++d) qT[int64_t{d} * hp + h] = real ? qh[d] : 0.0f;
        w[h] = real ? weights[t * num_heads + h] : 0.0f;
      }
      RunningTopK top(cand_buf.data(), topk);
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t first = b * bs;
        const int rows = static_cast<int>(std::min<int64_t>(bs, n_keys - first));
        const char* page = static_cast<const char*>(cache) + table[b] * page_bytes;
        // F32 pages are read in place; BF16 / FP8 ones widened per block.
        const float* keys = reinterpret_cast<const float*>(page);
        if (layout.dtype != DType::F32) {
          kt.indexer_widen_keys(page, rows, dim, bs, layout.dtype == DType::F8E4M3,
                                tile_buf.data());
          keys = tile_buf.data();
        }
        kt.indexer_scores(qT, w, hp, keys, rows, dim, score_buf.data());
        for (int r = 0; r < rows; ++r) top.push(score_buf[r], static_cast<int32_t>(first + r));
      }
      const int n = top.finish();
      if (parts == 1) {
        emit(t, cand_buf.data(), n);
      } else {
        std::copy(cand_buf.data(), cand_buf.data() + n, part_cands + item * topk);
        part_counts[item] = n;
      }
    }
  });
  if (parts == 1) return;
  // Merge each token's part lists (each sorted, at most topk): the best
  // topk of their union under the same order.
  parallel_for(num_tokens, 1, [&](int64_t t0, int64_t t1) {
    thread_local std::vector<Candidate> merged;
    for (int64_t t = t0; t < t1; ++t) {
      merged.clear();
      for (int64_t p = 0; p < parts; ++p) {
        const Candidate* c = part_cands + (t * parts + p) * topk;
        merged.insert(merged.end(), c, c + part_counts[t * parts + p]);
      }
      const int n = static_cast<int>(std::min<size_t>(merged.size(), size_t(topk)));
      std::partial_sort(merged.begin(), merged.begin() + n, merged.end(), ranks_before);
      emit(t, merged.data(), n);
    }
  });
}

}  // namespace pagoda::ops
