// The MLA latent-cache ops of ops.h: write_mla_kv, and mla_paged_attention's
// validation, tiling and thread split around the per-ISA tile kernel
// (mla_impl.h).
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/parallel.h"
#include "ops/cpu/kernels.h"
#include "ops/ops.h"

namespace pagoda::ops {

void write_mla_kv(const float* latent, const float* k_pe, const int64_t* slot_mapping,
                  int64_t num_tokens, const MLALayout& layout, void* cache, int64_t latent_stride,
                  int64_t pe_stride) {
  const int lora = layout.kv_lora_rank, rope = layout.rope_dim;
  PAGODA_CHECK(lora > 0 && rope >= 0 && layout.block_size > 0,
               "write_mla_kv: kv_lora_rank {} rope_dim {} block_size {}", lora, rope,
               layout.block_size);
  PAGODA_CHECK(layout.dtype == DType::F32 || layout.dtype == DType::BF16,
               "write_mla_kv: cache dtype {}", dtype_name(layout.dtype));
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
      if (layout.dtype == DType::BF16) {
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
  PAGODA_CHECK(layout.dtype == DType::F32 || layout.dtype == DType::BF16,
               "mla_paged_attention: cache dtype {}", dtype_name(layout.dtype));
  PAGODA_CHECK(batch.sliding_window == 0, "mla_paged_attention: sliding window {} (MLA has none)",
               batch.sliding_window);
  const int32_t* qsl = batch.query_start_loc;
  for (int s = 0; s < batch.num_seqs; ++s) {
    const int64_t num_new = qsl[s + 1] - qsl[s], len = batch.seq_lens[s];
    PAGODA_CHECK(num_new >= 0 && len >= num_new && (len + bs - 1) / bs <= batch.max_blocks_per_seq,
                 "mla_paged_attention: sequence {} has {} new of {} keys, {} blocks max", s,
                 num_new, len, batch.max_blocks_per_seq);
  }
  // Work item = (sequence, row tile, head block): up to kMaxTileQueries
  // queries that read each entry once between them. Decode tiles are one
  // row x up to 32 heads; head blocks shrink (halving) while there are
  // fewer items than threads, since the whole cache pass is arithmetic
  // bound at many heads and one item would leave the other threads idle.
  // The tiling never changes a result (mla_impl.h), only the speed.
  int64_t total_rows = 0;
  for (int s = 0; s < batch.num_seqs; ++s) total_rows += qsl[s + 1] - qsl[s];
  int tile_heads = std::min(num_heads, cpu::kMaxTileQueries);
  const int64_t threads = num_threads();
  while (tile_heads > 1) {
    const int64_t row_tiles =
        (total_rows * tile_heads + cpu::kMaxTileQueries - 1) / cpu::kMaxTileQueries;  // about
    if (row_tiles * ((num_heads + tile_heads - 1) / tile_heads) >= threads) break;
    tile_heads = (tile_heads + 1) / 2;
  }
  const int head_blocks = (num_heads + tile_heads - 1) / tile_heads;
  const int tile_rows = std::max(1, cpu::kMaxTileQueries / tile_heads);
  struct RowTile {
    int seq, row0, rows;
    int64_t keys;  // visible keys of its last row: its cost
  };
  // Grows only: no steady-state allocation (a reference, so the pool's
  // threads read this thread's list).
  thread_local std::vector<RowTile> tile_list;
  std::vector<RowTile>& tiles = tile_list;
  tiles.clear();
  for (int s = 0; s < batch.num_seqs; ++s) {
    const int64_t num_new = qsl[s + 1] - qsl[s];
    for (int64_t r = 0; r < num_new; r += tile_rows) {
      const int rows = static_cast<int>(std::min<int64_t>(tile_rows, num_new - r));
      tiles.push_back(
          {s, qsl[s] + static_cast<int>(r), rows, batch.seq_lens[s] - num_new + r + rows});
    }
  }
  // Costliest first: the pool hands out chunks in order, so threads finish
  // together.
  std::stable_sort(tiles.begin(), tiles.end(),
                   [](const RowTile& x, const RowTile& y) { return x.keys > y.keys; });
  const cpu::KernelTable& kt = cpu::active_kernels();
  const auto kernel = layout.dtype == DType::BF16 ? kt.mla_attention_bf16 : kt.mla_attention;
  const int64_t q_row_stride = strides.q_token ? strides.q_token : int64_t{num_heads} * ed;
  const int64_t q_head_stride = strides.q_head ? strides.q_head : ed;
  const int64_t out_row_stride = strides.out_token ? strides.out_token : int64_t{num_heads} * lora;
  const int64_t out_head_stride = strides.out_head ? strides.out_head : lora;
  parallel_for(static_cast<int64_t>(tiles.size()) * head_blocks, 1, [&](int64_t i0, int64_t i1) {
    thread_local std::vector<float> scratch;  // grown once per thread
    const auto need = static_cast<size_t>(cpu::mla_scratch_floats(lora));
    if (scratch.size() < need) scratch.resize(need);
    for (int64_t item = i0; item < i1; ++item) {
      const RowTile& tile = tiles[item / head_blocks];
      const int h0 = static_cast<int>(item % head_blocks) * tile_heads;
      const int64_t num_new = qsl[tile.seq + 1] - qsl[tile.seq];
      cpu::MlaTile a;
      a.q = q + tile.row0 * q_row_stride + h0 * q_head_stride;
      a.out = out + tile.row0 * out_row_stride + h0 * out_head_stride;
      a.q_row_stride = q_row_stride;
      a.q_head_stride = q_head_stride;
      a.out_row_stride = out_row_stride;
      a.out_head_stride = out_head_stride;
      a.rows = tile.rows;
      a.heads = std::min(tile_heads, num_heads - h0);
      a.cache = cache;
      a.block_table = batch.block_tables + int64_t{tile.seq} * batch.max_blocks_per_seq;
      a.block_size = bs;
      a.kv_lora = lora;
      a.entry_dim = ed;
      a.last_key = batch.seq_lens[tile.seq] - num_new + (tile.row0 - qsl[tile.seq]);
      a.scale = scale;
      kernel(a, scratch.data());
    }
  });
}

}  // namespace pagoda::ops
