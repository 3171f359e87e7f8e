// Hands KV-cache blocks to requests for every layer group, with automatic
// prefix caching (vLLM v1 style). Layers that share a KV spec (full
// attention, or a sliding window of W tokens) form a group; each group keeps
// its own block table per request, all drawn from one shared BlockPool. A
// logical block is always block_size token positions, for every group.
//
// Physical layout: group g's j-th layer stores its K/V in storage slot j, so
// the storage needs only max(layers per group) slots; block ids are never
// shared between groups at one time, so the groups never overwrite each other.
#pragma once

#include <cstdint>
#include <vector>

#include "kv/block_hash.h"
#include "kv/block_pool.h"

namespace pagoda {

struct KVCacheGroup {
  int64_t sliding_window = 0;  // 0 = full attention
  std::vector<int32_t> layers;
};

// Groups the layers by window, in order of first appearance.
std::vector<KVCacheGroup> make_kv_cache_groups(const std::vector<int64_t>& layer_sliding_window);

// A request's view of the cache: what the manager reads and updates.
struct KVRequestState {
  std::vector<std::vector<int32_t>> block_tables;  // [group][logical block]; -1 = released
  std::vector<BlockHash> block_hashes;             // of the request's full blocks so far
  int64_t num_cached_blocks = 0;                   // full blocks already registered in the pool
};

class KVCacheManager {
 public:
  KVCacheManager(std::vector<KVCacheGroup> groups, int32_t num_blocks, int32_t block_size,
                 bool enable_prefix_caching);

  const std::vector<KVCacheGroup>& groups() const { return groups_; }
  int32_t block_size() const { return block_size_; }
  const BlockPool& pool() const { return pool_; }
  bool prefix_caching() const { return prefix_caching_; }

  // For a request with nothing computed: takes the longest prefix of full
  // blocks of its tokens (prompt, plus output when it is resumed after
  // preemption) whose K/V every group still caches (a sliding group only
  // needs the blocks in its window at the end of that prefix), always
  // leaving at least one token to compute; returns how many tokens it covers.
  int64_t take_cached_prefix(KVRequestState& state, const std::vector<int32_t>& tokens);

  // Makes every group hold blocks for positions [0, num_tokens); sliding
  // groups release blocks no query from `num_computed` on can see. All or
  // nothing: false (changing nothing) if the pool is short.
  bool allocate(KVRequestState& state, int64_t num_computed, int64_t num_tokens);

  // Registers the request's newly full blocks (tokens [0, num_computed)) so
  // later requests can hit them.
  void cache_full_blocks(KVRequestState& state, const std::vector<int32_t>& tokens,
                         int64_t num_computed);

  // Releases every block the request holds (its tail blocks first).
  void free(KVRequestState& state);

  // Prefix-cache counters: prompt tokens looked up and found.
  int64_t queried_tokens() const { return queried_tokens_; }
  int64_t hit_tokens() const { return hit_tokens_; }

 private:
  int64_t first_needed_position(const KVCacheGroup& g, int64_t num_computed) const;
  // The longest hit of at most max_blocks blocks that group g can serve,
  // given which of the request's blocks it has cached.
  int64_t longest_hit(size_t g, const std::vector<bool>& cached, int64_t max_blocks) const;

  std::vector<KVCacheGroup> groups_;
  int32_t block_size_;
  bool prefix_caching_;
  BlockPool pool_;
  int64_t queried_tokens_ = 0, hit_tokens_ = 0;
};

}  // namespace pagoda
