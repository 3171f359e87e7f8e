// ops.h mla_sparse_attention: validation and the (token, head block) work
// split around the per-ISA sparse tile kernel (mla_sparse_impl.h).
#include <algorithm>
#include <vector>

#include "core/error.h"
#include "core/parallel.h"
#include "ops/cpu/kernels.h"
#include "ops/ops.h"

namespace pagoda::ops {

void mla_sparse_attention(const float* q, const void* cache, const MLALayout& layout,
                          const AttentionBatch& batch, const int32_t* topk_slots, int topk,
                          int num_heads, float scale, float* out, const MlaStrides& strides) {
  const int lora = layout.kv_lora_rank, ed = layout.entry_dim();
  PAGODA_CHECK(lora > 0 && layout.rope_dim >= 0 && layout.block_size > 0 && num_heads > 0 &&
                   topk >= 0,
               "mla_sparse_attention: kv_lora_rank {} rope_dim {} block_size {} heads {} topk {}",
               lora, layout.rope_dim, layout.block_size, num_heads, topk);
  PAGODA_CHECK(layout.dtype == DType::F32 || layout.dtype == DType::BF16 ||
                   (layout.dtype == DType::F8E4M3 && lora % kMlaFp8Group == 0),
               "mla_sparse_attention: cache dtype {} with kv_lora_rank {}",
               dtype_name(layout.dtype), lora);
  const int64_t num_tokens = batch.num_seqs > 0 ? batch.query_start_loc[batch.num_seqs] : 0;
  // Work item = (token, head block). Every token has its own list, so a
  // tile is one token's heads (up to kMaxTileQueries), which share each
  // listed entry's reads; with fewer items than threads (small decode
  // batches), head blocks shrink so every thread gets work. The tiling
  // never changes a result (mla_sparse_impl.h).
  const int64_t threads = num_threads();
  int tile_heads = std::min(num_heads, cpu::kMaxTileQueries);
  auto items_for = [&](int heads) { return num_tokens * ((num_heads + heads - 1) / heads); };
  while (tile_heads > 1 && items_for(tile_heads) < threads) tile_heads = (tile_heads + 1) / 2;
  const int head_blocks = (num_heads + tile_heads - 1) / tile_heads;
  const cpu::KernelTable& kt = cpu::active_kernels();
  const bool fp8 = layout.dtype == DType::F8E4M3;
  const auto kernel = fp8                            ? kt.mla_sparse_attention_fp8
                      : layout.dtype == DType::BF16 ? kt.mla_sparse_attention_bf16
                                                    : kt.mla_sparse_attention;
  const int64_t entry_stride = fp8 ? layout.entry_bytes() : ed;  // kernel elements
  const int64_t q_row_stride = strides.q_token ? strides.q_token : int64_t{num_heads} * ed;
  const int64_t q_head_stride = strides.q_head ? strides.q_head : ed;
  const int64_t out_row_stride = strides.out_token ? strides.out_token : int64_t{num_heads} * lora;
  const int64_t out_head_stride = strides.out_head ? strides.out_head : lora;
  parallel_for(num_tokens * head_blocks, 1, [&](int64_t i0, int64_t i1) {
    thread_local std::vector<float> scratch;  // grown once per thread
    const auto need = static_cast<size_t>(cpu::mla_scratch_floats(lora, fp8 ? ed : 0));
    if (scratch.size() < need) scratch.resize(need);
    for (int64_t item = i0; item < i1; ++item) {
      const int64_t t = item / head_blocks;
      const int h0 = static_cast<int>(item % head_blocks) * tile_heads;
      cpu::MlaSparseTile a;
      a.q = q + t * q_row_stride + h0 * q_head_stride;
      a.out = out + t * out_row_stride + h0 * out_head_stride;
      a.q_head_stride = q_head_stride;
      a.out_head_stride = out_head_stride;
      a.heads = std::min(tile_heads, num_heads - h0);
      a.cache = cache;
      a.slots = topk_slots + t * topk;
      a.count = topk;
      a.kv_lora = lora;
      a.entry_dim = ed;
      a.entry_stride = entry_stride;
      a.scale = scale;
      kernel(a, scratch.data());
    }
  });
}

}  // namespace pagoda::ops
