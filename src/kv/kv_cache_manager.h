// Hands KV-cache blocks to requests for every cache group of a plan
// (kv/kv_cache_plan.h), with automatic prefix caching (vLLM v1 style).
// Caches with equal specs form a group; each group keeps its own block
// table per request, drawn from its pool (one BlockPool per page size). A
// logical block is always block_size token positions, for every group,
// whatever its compress ratio.
#pragma once

#include <cstdint>
#include <vector>

#include "kv/block_hash.h"
#include "kv/block_pool.h"
#include "kv/kv_cache_plan.h"

namespace pagoda {

// A request's view of the cache: what the manager reads and updates.
struct KVRequestState {
  std::vector<std::vector<int32_t>> block_tables;  // [group][logical block]; -1 = released
  std::vector<BlockHash> block_hashes;             // of the request's full blocks so far
  int64_t num_cached_blocks = 0;                   // full blocks already registered in the pool
  // New for every admission (take_cached_prefix, or allocate for a request
  // holding no block): lets a holder of a copy of the block tables (the
  // model runner's persistent rows) tell a re-admitted or new request at the
  // same address from the one it copied.
  uint64_t generation = 0;
};

class KVCacheManager {
 public:
  // Every pool of the plan gets num_blocks blocks.
  KVCacheManager(KVCachePlan plan, int32_t num_blocks, bool enable_prefix_caching);

  const KVCachePlan& plan() const { return plan_; }
  const std::vector<KVCacheGroup>& groups() const { return plan_.groups; }
  int32_t block_size() const { return plan_.block_size; }
  const std::vector<BlockPool>& pools() const { return pools_; }
  // Blocks per pool, and the fewest free in any pool (the pool that runs
  // dry first bounds what can be admitted).
  int32_t num_blocks() const { return pools_.front().num_blocks(); }
  int32_t num_free_blocks() const;
  bool prefix_caching() const { return prefix_caching_; }
  // Throws InternalError if any pool's invariants are broken.
  void check_invariants() const;

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
  BlockPool& pool_of(size_t g) { return pools_[plan_.groups[g].pool]; }
  // The longest hit of at most max_blocks blocks that group g can serve,
  // given which of the request's blocks it has cached.
  int64_t longest_hit(size_t g, const std::vector<bool>& cached, int64_t max_blocks) const;

  KVCachePlan plan_;
  int32_t block_size_;
  bool prefix_caching_;
  std::vector<BlockPool> pools_;
  int64_t queried_tokens_ = 0, hit_tokens_ = 0;
  uint64_t next_generation_ = 0;
};

}  // namespace pagoda
