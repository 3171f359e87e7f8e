// The MLA latent-cache ops of ops.h: write_mla_kv, and mla_paged_attention's
// validation, tiling and thread split around the per-ISA tile kernel
// (mla_impl.h).
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

// One fp8_ds_mla entry (ops.h MLALayout): per 128 latent values a scale
// amax / 448 (1 for an all-zero group) and e4m3 bytes of x / scale; k_pe as
// bf16.
void write_mla_entry_fp8(const float* c, const float* pe, const MLALayout& layout, uint8_t* dst) {
  const int lora = layout.kv_lora_rank;
  for (int g = 0; g < lora / kMlaFp8Group; ++g) {
    const float* x = c + g * kMlaFp8Group;
    float amax = 0.0f;
    for (int d = 0; d < kMlaFp8Group; ++d) amax = std::fmax(amax, std::fabs(x[d]));
    const float scale = amax > 0.0f ? amax / 448.0f : 1.0f;
    for (int d = 0; d < kMlaFp8Group; ++d) dst[g * kMlaFp8Group + d] = f32_to_f8e4m3(x[d] / scale);
    std::memcpy(dst + layout.fp8_scales_offset() + 4 * g, &scale, sizeof(float));
  }
  uint8_t* rope = dst + layout.fp8_rope_offset();
  for (int d = 0; d < layout.rope_dim; ++d) {
    const uint16_t h = f32_to_bf16(pe[d]);
    std::memcpy(rope + 2 * d, &h, sizeof(h));
  }
}

}  // namespace

void write_mla_kv(const float* latent, const float* k_pe, const int64_t* slot_mapping,
                  int64_t num_tokens, const MLALayout& layout, void* cache, int64_t latent_stride,
                  int64_t pe_stride) {
  const int lora = layout.kv_lora_rank, rope = layout.rope_dim;
  PAGODA_CHECK(lora > 0 && rope >= 0 && layout.block_size > 0,
               "write_mla_kv: kv_lora_rank {} rope_dim {} block_size {}", lora, rope,
               layout.block_size);
  PAGODA_CHECK(layout.dtype == DType::F32 || layout.dtype == DType::BF16 ||
                   (layout.dtype == DType::F8E4M3 && lora % kMlaFp8Group == 0),
               "write_mla_kv: cache dtype {} with kv_lora_rank {}", dtype_name(layout.dtype),
               lora);
  if (latent_stride == 0) latent_stride = lora;
  if (pe_stride == 0) pe_stride = rope;
  // A token's entry is ~1-2 KB: scalar conversion costs little next to the
  // projections that made it, so tokens are only split across threads.
  parallel_for(num_tokens, 64, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      if (slot_mapping[t] < 0) continue;  // padding
      const int64_t to = layout.entry_offset(slot_mapping[t]);
      const float* c = latent + t * latent_stride;
      const float* pe = k_pe + t * pe_stride;
      if (layout.dtype == DType::F8E4M3) {
        write_mla_entry_fp8(c, pe, layout, static_cast<uint8_t*>(cache) +
                                               slot_mapping[t] * layout.entry_bytes());
      } else if (layout.dtype == DType::BF16) {
        uint16_t* dst = static_cast<uint16_t*>(cache) + to;
        for (int d = 0; d < lora; ++d) dst[d] = f32_to_bf16(c[d]);
        for (int d = 0; d < rope; ++d) dst[lora + d] = f32_to_bf16(pe[d]);
      } else {
        float* dst = static_cast<float*>(cache) + to;
        std::memcpy(dst, c, sizeof(float) * static_cast<size_t>(lora));
        std::memcpy(dst + lora, pe, sizeof(float) * static_cast<size_t>(rope));
      }
    }
  });
}

void mla_paged_attention(const float* q, const void* cache, const MLALayout& layout,
                         const AttentionBatch& batch, int num_heads, float scale, float* out,
                         const MlaStrides& strides) {
  const int lora = layout.kv_lora_rank, ed = layout.entry_dim(), bs = layout.block_size;
  PAGODA_CHECK(lora > 0 && layout.rope_dim >= 0 && bs > 0 && num_heads > 0,
               "mla_paged_attention: kv_lora_rank {} rope_dim {} block_size {} heads {}", lora,
               layout.rope_dim, bs, num_heads);
  PAGODA_CHECK(layout.dtype == DType::F32 || layout.dtype == DType::BF16 ||
                   (layout.dtype == DType::F8E4M3 && lora % kMlaFp8Group == 0),
               "mla_paged_attention: cache dtype {} with kv_lora_rank {}",
               dtype_name(layout.dtype), lora);
  PAGODA_CHECK(batch.sliding_window == 0, "mla_paged_attention: sliding window {} (MLA has none)",
               batch.sliding_window);
  const int32_t* qsl = batch.query_start_loc;
  for (int s = 0; s < batch.num_seqs; ++s) {
    const int64_t num_new = qsl[s + 1] - qsl[s], len = batch.seq_lens[s];
    PAGODA_CHECK(num_new >= 0 && len >= num_new && (len + bs - 1) / bs <= batch.max_blocks_per_seq,
                 "mla_paged_attention: sequence {} has {} new of {} keys, {} blocks max", s,
                 num_new, len, batch.max_blocks_per_seq);
  }
  // Work item = (row tile, head block): up to kMaxTileQueries queries of
  // one sequence that read each entry once between them. Decode tiles are
  // one row x up to 32 heads. With fewer items than threads, single-row
  // tiles of several kMlaSegmentKeys segments split into one item per
  // segment (their states merged after, in order: the same bits, and the
  // cache still read once), then head blocks shrink (halving; each block
  // reads the entries again). The tiling never changes a result
  // (mla_impl.h), only the speed.
  const int64_t threads = num_threads();
  const int64_t seg_keys = cpu::kMlaSegmentKeys;
  auto segments = [&](int64_t keys) { return (keys + seg_keys - 1) / seg_keys; };
  // Items, and floats of segment states, for a head-block size and split.
  auto plan = [&](int heads, bool split, int64_t* state_floats) {
    const int64_t blocks = (num_heads + heads - 1) / heads;
    const int rows_per_tile = std::max(1, cpu::kMaxTileQueries / heads);
    int64_t items = 0, floats = 0;
    for (int s = 0; s < batch.num_seqs; ++s) {
      const int64_t num_new = qsl[s + 1] - qsl[s];
      for (int64_t r = 0; r < num_new; r += rows_per_tile) {
        const int64_t rows = std::min<int64_t>(rows_per_tile, num_new - r);
        const int64_t n = split && rows == 1 ? segments(batch.seq_lens[s] - num_new + r + 1) : 1;
        items += blocks * n;
        if (n > 1) floats += int64_t{num_heads} * n * (lora + 2);
      }
    }
    if (state_floats) *state_floats = floats;
    return items;
  };
  // Segment states beyond this (long contexts x many rows) are not worth
  // their memory: such steps have enough items anyway.
  constexpr int64_t kMaxStateFloats = int64_t{8} << 20;
  int tile_heads = std::min(num_heads, cpu::kMaxTileQueries);
  int64_t state_floats = 0;
  bool split = false;
  if (plan(tile_heads, false, nullptr) < threads) {
    split = plan(tile_heads, true, &state_floats) > plan(tile_heads, false, nullptr) &&
            state_floats <= kMaxStateFloats;
  }
  while (tile_heads > 1 && plan(tile_heads, split, nullptr) < threads) {
    tile_heads = (tile_heads + 1) / 2;
  }
  const int head_blocks = (num_heads + tile_heads - 1) / tile_heads;
  const int tile_rows = std::max(1, cpu::kMaxTileQueries / tile_heads);
  struct RowTile {
    int seq, row0, rows;
    int64_t keys;    // visible keys of its last row: its cost
    int segments;    // > 1: split, one item per (head block, segment)
    int64_t states;  // its segment states: floats from the buffer start
    int64_t item0;   // its first item
  };
  // Grow only: no steady-state allocation (references, so the pool's
  // threads read this thread's lists).
  thread_local std::vector<RowTile> tile_list;
  thread_local std::vector<float> state_buffer;
  std::vector<RowTile>& tiles = tile_list;
  tiles.clear();
  for (int s = 0; s < batch.num_seqs; ++s) {
    const int64_t num_new = qsl[s + 1] - qsl[s];
    for (int64_t r = 0; r < num_new; r += tile_rows) {
      const int rows = static_cast<int>(std::min<int64_t>(tile_rows, num_new - r));
      const int64_t keys = batch.seq_lens[s] - num_new + r + rows;
      const int n = split && rows == 1 ? static_cast<int>(segments(keys)) : 1;
      tiles.push_back({s, qsl[s] + static_cast<int>(r), rows, keys, n, 0, 0});
    }
  }
  // Costliest first: the pool hands out chunks in order, so threads finish
  // together.
  std::stable_sort(tiles.begin(), tiles.end(),
                   [](const RowTile& x, const RowTile& y) { return x.keys > y.keys; });
  int64_t items = 0, floats = 0;
  for (RowTile& t : tiles) {
    t.item0 = items;
    items += int64_t{head_blocks} * t.segments;
    if (t.segments > 1) {
      t.states = floats;
      floats += int64_t{num_heads} * t.segments * (lora + 2);
    }
  }
  if (state_buffer.size() < static_cast<size_t>(floats))
    state_buffer.resize(static_cast<size_t>(floats));
  float* states = state_buffer.data();
  const cpu::KernelTable& kt = cpu::active_kernels();
  const bool fp8 = layout.dtype == DType::F8E4M3;
  const auto kernel = fp8                            ? kt.mla_attention_fp8
                      : layout.dtype == DType::BF16 ? kt.mla_attention_bf16
                                                    : kt.mla_attention;
  // Entry stride in the kernel's element type (fp8: bytes).
  const int64_t entry_stride = fp8 ? layout.entry_bytes() : ed;
  const int64_t q_row_stride = strides.q_token ? strides.q_token : int64_t{num_heads} * ed;
  const int64_t q_head_stride = strides.q_head ? strides.q_head : ed;
  const int64_t out_row_stride = strides.out_token ? strides.out_token : int64_t{num_heads} * lora;
  const int64_t out_head_stride = strides.out_head ? strides.out_head : lora;
  auto row_out = [&](const RowTile& tile, int h) {
    return out + tile.row0 * out_row_stride + h * out_head_stride;
  };
  // The tile an item belongs to: tiles are few, items in tile order.
  auto tile_of = [&](int64_t item) {
    size_t lo = 0, hi = tiles.size();  // last tile with item0 <= item
    while (hi - lo > 1) {
      const size_t mid = (lo + hi) / 2;
      (tiles[mid].item0 <= item ? lo : hi) = mid;
    }
    return lo;
  };
  parallel_for(items, 1, [&](int64_t i0, int64_t i1) {
    thread_local std::vector<float> scratch;  // grown once per thread
    const auto need = static_cast<size_t>(cpu::mla_scratch_floats(lora, fp8 ? ed : 0));
    if (scratch.size() < need) scratch.resize(need);
    for (int64_t item = i0; item < i1; ++item) {
      const RowTile& tile = tiles[tile_of(item)];
      const int64_t k = item - tile.item0;  // head block major, then segment
      const int h0 = static_cast<int>(k / tile.segments) * tile_heads;
      const int seg = static_cast<int>(k % tile.segments);
      const int64_t num_new = qsl[tile.seq + 1] - qsl[tile.seq];
      cpu::MlaTile a;
      a.q = q + tile.row0 * q_row_stride + h0 * q_head_stride;
      a.out = row_out(tile, h0);
      a.q_row_stride = q_row_stride;
      a.q_head_stride = q_head_stride;
      a.out_row_stride = out_row_stride;
      a.out_head_stride = out_head_stride;
      a.rows = tile.rows;
      a.heads = std::min(tile_heads, num_heads - h0);
      a.cache = cache;
      a.block_table = batch.block_table(tile.seq);
      a.block_size = bs;
      a.kv_lora = lora;
      a.entry_dim = ed;
      a.entry_stride = entry_stride;
      a.last_key = batch.seq_lens[tile.seq] - num_new + (tile.row0 - qsl[tile.seq]);
      a.scale = scale;
      if (tile.segments > 1) {  // head h's states: [segments][lora + 2]
        a.seg_begin = seg * seg_keys;
        a.partial_head_stride = int64_t{tile.segments} * (lora + 2);
        a.partial = states + tile.states + h0 * a.partial_head_stride + int64_t{seg} * (lora + 2);
      }
      kernel(a, scratch.data());
    }
  });
  if (floats == 0) return;
  // Merge the split tiles' segment states, one (tile, head) per unit.
  thread_local std::vector<const RowTile*> split_list;
  std::vector<const RowTile*>& split_tiles = split_list;
  split_tiles.clear();
  for (const RowTile& t : tiles) {
    if (t.segments > 1) split_tiles.push_back(&t);
  }
  parallel_for(static_cast<int64_t>(split_tiles.size()) * num_heads, 4,
               [&](int64_t u0, int64_t u1) {
                 for (int64_t u = u0; u < u1; ++u) {
                   const RowTile& t = *split_tiles[u / num_heads];
                   const int h = static_cast<int>(u % num_heads);
                   kt.mla_merge(states + t.states + h * int64_t{t.segments} * (lora + 2),
                                t.segments, lora, row_out(t, h));
                 }
               });
}

}  // namespace pagoda::ops
