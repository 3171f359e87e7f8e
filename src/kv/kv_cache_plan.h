// From a model's per-layer cache specs to the shape of the KV pool: layer
// groups (caches with equal specs share block tables), pools of equal page
// size (groups whose pages have the same byte size draw from one pool of
// block ids, so a page one kind leaves unused serves another), and the
// bytes and blocks one sequence needs. The plan is plain data, computed the
// same way on every tensor-parallel rank.
//
// Physical layout: a pool with S slots and N blocks is S arrays of N pages.
// A group's i-th cache tensor (in declaration order: layer by layer, each
// layer's caches in its order) lives in slot i of its pool, so one block id
// addresses one page in each of the group's tensors. Groups of one pool
// never hold the same block id at once, so they never overwrite each other;
// a pool needs as many slots as its largest group has tensors.
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
  std::vector<KVTensorRef> tensors;  // tensor i lives in slot i of the pool
  int32_t pool = 0;
};

struct KVPoolPlan {
  int64_t page_bytes = 0;
  int32_t num_slots = 0;
};

struct KVCachePlan {
  int32_t block_size = 0;
  std::vector<KVCacheGroup> groups;
  std::vector<KVPoolPlan> pools;
  // For each layer, for each of its caches: the group holding it.
  std::vector<std::vector<int32_t>> layer_cache_group;

  // Bytes one block id takes when every pool has the same number of blocks
  // (the engine sizes them alike: a sequence needs the same count of
  // logical blocks in every full-attention group).
  int64_t bytes_per_block() const;
  // Blocks of each pool that one sequence of `num_tokens` positions holds
  // at most at once: every block for a full group; for a sliding group the
  // blocks its window can reach (+1 partly outside, +1 being filled).
  std::vector<int64_t> blocks_per_sequence(int64_t num_tokens) const;
  // The most any pool needs for one such sequence: the pools' common
  // minimum size.
  int64_t min_blocks(int64_t num_tokens) const;
  // Blocks group g holds for one sequence of num_tokens positions (all of
  // them for full attention; a window's worth for a sliding group).
  int64_t group_blocks(size_t g, int64_t num_tokens) const;
  // Bytes one sequence of num_tokens positions holds at most at once, over
  // every group's pages of every tensor.
  int64_t bytes_per_sequence(int64_t num_tokens) const;
};

// Groups equal specs (the whole spec is the key, in order of first
// appearance) and pools equal page sizes. Throws InputError for a spec the
// block size cannot hold (block_size not a multiple of compress_ratio) or
// an empty list.
KVCachePlan plan_kv_cache(const std::vector<LayerKVCache>& caches, int32_t block_size);

}  // namespace pagoda
