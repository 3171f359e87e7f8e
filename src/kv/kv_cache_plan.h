// From a model's per-layer cache specs to the shape of the KV pool: layer
// groups (caches with equal specs share block tables), pools of page-size
// buckets (groups whose pages have about the same byte size draw from one
// pool of block ids, so a page one kind leaves unused serves another), and
// the pages and bytes one sequence needs. The plan is plain data, computed
// the same way on every tensor-parallel rank.
//
// Page granularity: every group resolves its own block size (positions per
// page: KVCacheSpec::block_size, or the engine's --block-size for 0), which
// must divide the engine's block size (prefix caching hashes engine blocks;
// a smaller page is one of block_size / group block size sub-pages).
//
// Buckets (spec §5.4, vLLM's three V4 page sizes): distinct page sizes are
// taken largest first; a page size joins the bucket of the smallest larger
// bucket when that bucket's page is at most 1.25x its own (a page padded to
// it wastes at most 20% of what it holds), else it starts a new bucket. A
// pool's page is its bucket's (largest) size; a smaller page uses its
// front and leaves the rest as padding. For DeepSeek V4-Pro in fp8 this
// gives 37,440 / 8,640 / 1,728 B with the 32,832-B compressor-state pages
// in the 37,440 bucket (1.14x); in bf16 all kinds of a bucket already
// align to one size: 65,664 / 16,704 / 2,304 B, no padding.
//
// Physical layout: a pool with S slots and N blocks is S arrays of N pages.
// A group's i-th cache tensor (in declaration order: layer by layer, each
// layer's caches in its order) lives in slot i of its pool, so one block id
// addresses one page in each of the group's tensors. Groups of one pool
// never hold the same block id at once, so they never overwrite each other.
// A block id held by a group of fewer tensors than S leaves the other slots'
// pages unused, so the kinds (equal specs) of one pool are split into groups
// of one tensor count g (vLLM's hybrid allocator,
// _get_kv_cache_groups_uniform_page_size) and S = g. The candidates for g
// are the kinds' own tensor counts; the one leaving the fewest empty slots,
// weighted by the pages each kind holds for a long sequence (full-attention
// kinds dominate; a sliding kind holds only its window's pages), wins, the
// larger on ties; if even it leaves over 5% empty, g = 1. V4-Pro's large
// bucket (61 window, 30 c4 compressed, 30 c4 state, 31 c128 state tensors)
// gets g = 30: only the window's and the c128 state's last groups, of 1
// tensor and a few pages each, leave slots empty (0.5%). Dense models (one
// kind per pool, or kinds of equal counts) keep a single group per kind.
#pragma once

#include <cstdint>
#include <vector>

#include "kv/kv_cache_spec.h"

namespace pagoda {

// A cache tensor: cache `cache` (index in the layer's declaration order) of
// layer `layer`.
struct KVTensorRef {
  int32_t layer = 0;
  int32_t cache = 0;
  bool operator==(const KVTensorRef&) const = default;
};

struct KVCacheGroup {
  KVCacheSpec spec;
  // Token positions one page (one block-table entry) of this group covers:
  // spec.block_size, or the engine's block size when that is 0.
  int32_t block_size = 0;
  std::vector<KVTensorRef> tensors;  // tensor i lives in slot i of the pool
  int32_t pool = 0;
  // Pages of the engine's block size: block_size divides it.
  int32_t pages_per_block(int32_t engine_block_size) const {
    return engine_block_size / block_size;
  }
};

struct KVPoolPlan {
  int64_t page_bytes = 0;  // the bucket's page: every group's page fits in it
  int32_t num_slots = 0;   // the tensor count of its groups (at most)
};

struct KVCachePlan {
  int32_t block_size = 0;  // the engine's: prefix caching hashes blocks of it
  std::vector<KVCacheGroup> groups;
  std::vector<KVPoolPlan> pools;
  // For each layer, for each of its caches: the group holding it.
  std::vector<std::vector<int32_t>> layer_cache_group;

  // Bytes one block id takes in every pool together (slots x page bytes).
  int64_t bytes_per_block() const;
  // Pages of each pool that one sequence of `num_tokens` positions holds
  // at most at once (the sum of group_blocks over the pool's groups).
  std::vector<int64_t> blocks_per_sequence(int64_t num_tokens) const;
  // Pages group g holds for one sequence of num_tokens positions, at its
  // own block size: all of them for full attention; for a sliding group the
  // pages its window can reach (+1 partly outside, +1 being filled).
  int64_t group_blocks(size_t g, int64_t num_tokens) const;
  // Bytes of the pages one sequence of num_tokens positions holds at most
  // at once, over every group's pages of every tensor (pages at the pool's
  // page size: alignment and bucket padding included).
  int64_t bytes_per_sequence(int64_t num_tokens) const;
  // Bytes of the pages a sequence holds between steps once num_tokens
  // positions are computed: a sliding group only the pages of positions
  // [num_tokens - W + 1, num_tokens) (the next query's window; the manager
  // released the rest), a full group every page. What a decoding request
  // holds; bytes_per_sequence adds the pages a step may take on the way.
  int64_t bytes_held_between_steps(int64_t num_tokens) const;
  // Pool memory one such sequence takes: its block ids in each pool times
  // that pool's slots x page bytes (adds the slots a smaller group leaves
  // empty). The engine sizes pools by it (pool p gets
  // budget x blocks_per_sequence[p] / reserved_bytes_per_sequence blocks).
  int64_t reserved_bytes_per_sequence(int64_t num_tokens) const;
};

// Block counts of each pool for a memory budget: pool p gets
// budget x blocks_per_sequence(max_model_len)[p] / reserved_bytes_per_sequence
// blocks, so every pool runs out at the same number of max_model_len
// sequences and no pool's memory idles while another is full (one pool:
// budget / bytes_per_block, as a dense model always had). token_capacity:
// as many such sequences as the scarcest pool holds, times max_model_len.
// The budget must hold one such sequence (checked by the caller).
struct KVPoolSizes {
  std::vector<int64_t> num_blocks;  // per pool, at most INT32_MAX
  int64_t token_capacity = 0;
};
KVPoolSizes size_kv_pools(const KVCachePlan& plan, int64_t budget_bytes, int64_t max_model_len);

// Groups equal specs (the whole spec is the key, in order of first
// appearance; split to one tensor count per pool), and buckets page sizes
// into pools (in order of first appearance). Throws InputError for an
// engine block size that is not a multiple of a spec's block size, a group
// block size that is not a multiple of its compress_ratio, or an empty list.
KVCachePlan plan_kv_cache(const std::vector<LayerKVCache>& caches, int32_t block_size);

}  // namespace pagoda
