// ops.h v4_sparse_attention: validation and the work split around the
// per-ISA tile kernel (v4_attention_impl.h).
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/parallel.h"
#include "ops/cpu/kernels.h"
#include "ops/ops.h"

namespace pagoda::ops {
namespace {

void check_entry_layout(const V4EntryLayout& l, const char* which) {
  PAGODA_CHECK(l.entries_per_page > 0 && l.head_dim > 0 && l.rope_dim >= 0 &&
                   l.rope_dim <= l.head_dim &&
                   (l.dtype == DType::F32 || l.dtype == DType::BF16 || l.dtype == DType::F8E4M3),
               "v4_sparse_attention: {} layout entries_per_page {} head_dim {} rope_dim {} dtype {}",
               which, l.entries_per_page, l.head_dim, l.rope_dim, dtype_name(l.dtype));
}

}  // namespace

void v4_sparse_attention(const float* q, int64_t num_tokens, int num_heads,
                         const void* window_cache, const V4EntryLayout& window_layout,
                         const int32_t* window_slots, int window_count,
                         const void* comp_cache, const V4EntryLayout& comp_layout,
                         const int32_t* comp_slots, int comp_count,
                         const float* sink, float scale, float* out) {
  const int dv = window_layout.head_dim;
  PAGODA_CHECK(num_tokens >= 0 && num_heads > 0 && window_count >= 0 && comp_count >= 0,
               "v4_sparse_attention: tokens {} heads {} window_count {} comp_count {}", num_tokens,
               num_heads, window_count, comp_count);
  check_entry_layout(window_layout, "window");
  if (comp_count > 0) {
    check_entry_layout(comp_layout, "compressed");
    PAGODA_CHECK(comp_cache != nullptr && comp_layout.head_dim == dv,
                 "v4_sparse_attention: compressed cache {} head_dim {} (window {})",
                 comp_cache != nullptr, comp_layout.head_dim, dv);
  }
  const int positions = window_count + comp_count;
  const int segments = (positions + cpu::kV4SegmentSlots - 1) / cpu::kV4SegmentSlots;
  // Work item = (token, head block), each reading every listed entry once
  // for its heads. Fewer items than threads (decode of a few tokens): each
  // segment of the lists becomes its own item, writing a partial state
  // that v4_finish folds after, the same bits (kernels.h); only then do
  // head blocks shrink, which re-reads entries once per block.
  const int64_t threads = num_threads();
  int tile_heads = std::min(num_heads, cpu::kMaxTileQueries);
  auto head_blocks_for = [&](int heads) { return (num_heads + heads - 1) / heads; };
  const bool split = segments > 1 && num_tokens * head_blocks_for(tile_heads) < threads;
  const int64_t parts = split ? segments : 1;
  while (tile_heads > 4 && num_tokens * head_blocks_for(tile_heads) * parts < threads)
    tile_heads = (tile_heads + 1) / 2;
  const int head_blocks = head_blocks_for(tile_heads);
  const cpu::KernelTable& kt = cpu::active_kernels();
  // Partial states [token][head][segment][dv + 2] (split only; grow-only).
  thread_local std::vector<float> partial_buf;
  if (split) partial_buf.resize(static_cast<size_t>(num_tokens * num_heads * segments * (dv + 2)));
  float* partials = partial_buf.data();
  const int64_t row = int64_t{num_heads} * dv;
  parallel_for(num_tokens * head_blocks * parts, 1, [&](int64_t i0, int64_t i1) {
    thread_local std::vector<float> scratch;  // grown once per thread
    const auto need = static_cast<size_t>(cpu::mla_scratch_floats(dv, dv));
    if (scratch.size() < need) scratch.resize(need);
    for (int64_t item = i0; item < i1; ++item) {
      const int64_t t = item / (head_blocks * parts);
      const int h0 = static_cast<int>(item / parts % head_blocks) * tile_heads;
      const int seg = static_cast<int>(item % parts);
      cpu::V4AttentionTile a;
      a.q = q + t * row + int64_t{h0} * dv;
      a.out = out + t * row + int64_t{h0} * dv;
      a.sink = sink + h0;
      a.heads = std::min(tile_heads, num_heads - h0);
      a.head_dim = dv;
      a.scale = scale;
      a.src[0] = {window_cache, &window_layout, window_slots + t * window_count, window_count};
      a.src[1] = {comp_cache, &comp_layout, comp_slots + t * comp_count, comp_count};
      if (split) {
        a.seg_begin = seg;
        a.seg_end = seg + 1;
        // Head h's states are segments apart: v4_finish reads them in order.
        a.partial = partials + ((t * num_heads + h0) * segments + seg) * (dv + 2);
        a.partial_head_stride = int64_t{segments} * (dv + 2);
      } else {
        a.seg_begin = 0;
        a.seg_end = segments;
      }
      kt.v4_attention(a, scratch.data());
    }
  });
  if (!split) return;
  parallel_for(num_tokens * num_heads, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int h = static_cast<int>(i % num_heads);
      kt.v4_finish(partials + i * segments * (dv + 2), segments, dv, sink[h], out + i * dv);
    }
  });
}

}  // namespace pagoda::ops
