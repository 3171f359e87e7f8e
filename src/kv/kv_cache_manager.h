// Hands KV-cache blocks to requests for every cache group of a plan
// (kv/kv_cache_plan.h), with automatic prefix caching (vLLM v1 style).
// Caches with equal specs form a group; each group keeps its own block
// table per request, drawn from its pool (one BlockPool per page-size
// bucket), with one entry per page of the group's block size (positions per
// page, KVCacheGroup::block_size), whatever its compress ratio.
//
// Prefix caching hashes blocks of the engine's block size B. A group whose
// pages cover b < B positions caches the B/b sub-pages of full block i
// under keys derived from (hash_i, group, sub-index), so a sub-page is found
// again only after the same prefix up to the end of block i; a hit of n
// blocks needs, per group, every sub-page the query at n*B reads. Sliding
// groups release pages that no later query reads before their block is full
// (a compressor state of 8 positions in 4-position pages keeps 2 or 3 of a
// 256-position block's 64 pages); the pages a query at the block boundary
// reads are still held when the block is registered, so a hit there finds
// them.
#pragma once

#include <cstdint>
#include <vector>

#include "kv/block_hash.h"
#include "kv/block_pool.h"
#include "kv/kv_cache_plan.h"

namespace pagoda {

// A request's view of the cache: what the manager reads and updates.
struct KVRequestState {
  std::vector<std::vector<int32_t>> block_tables;  // [group][page of the group's block size]; -1 = released
  std::vector<BlockHash> block_hashes;             // of the request's full engine blocks so far
  int64_t num_cached_blocks = 0;                   // full engine blocks already registered
  // New for every admission (take_cached_prefix, or allocate for a request
  // holding no block): lets a holder of a copy of the block tables (the
  // model runner's persistent rows) tell a re-admitted or new request at the
  // same address from the one it copied.
  uint64_t generation = 0;
};

class KVCacheManager {
 public:
  // Pool p of the plan gets num_blocks[p] blocks (the engine sizes each
  // pool by what one sequence needs from it: KVCachePlan::blocks_per_sequence).
  KVCacheManager(KVCachePlan plan, const std::vector<int32_t>& num_blocks,
                 bool enable_prefix_caching);
  // Every pool gets num_blocks blocks.
  KVCacheManager(KVCachePlan plan, int32_t num_blocks, bool enable_prefix_caching);

  const KVCachePlan& plan() const { return plan_; }
  const std::vector<KVCacheGroup>& groups() const { return plan_.groups; }
  int32_t block_size() const { return plan_.block_size; }
  const std::vector<BlockPool>& pools() const { return pools_; }
  // Blocks (pages) of all pools together, and how many of them are free;
  // admission checks each pool on its own (allocate).
  int32_t num_blocks() const;
  int32_t num_free_blocks() const;
  bool prefix_caching() const { return prefix_caching_; }
  // A prefix hit gives up its last block (vLLM's rule for EAGLE/MTP
  // drafters): the MTP layer's entry at a block's last position pairs it
  // with the NEXT token, which the block's hash does not cover, so the
  // last hit block is recomputed, and the entries of every block kept were
  // computed with the token that follows them in this request too.
  void set_drop_last_hit_block(bool drop) { drop_last_hit_block_ = drop; }
  // Throws InternalError if any pool's invariants are broken.
  void check_invariants() const;

  // For a request with nothing computed: takes the longest prefix of full
  // engine blocks of its tokens (prompt, plus output when it is resumed
  // after preemption) whose K/V every group still caches (a sliding group
  // only needs the pages in its window at the end of that prefix), always
  // leaving at least one token to compute; returns how many tokens it covers.
  int64_t take_cached_prefix(KVRequestState& state, const std::vector<int32_t>& tokens);

  // Makes every group hold pages for positions [0, num_tokens); sliding
  // groups first release pages no query from `num_computed` on can see.
  // All or nothing: false (taking nothing) if any pool is short.
  bool allocate(KVRequestState& state, int64_t num_computed, int64_t num_tokens);

  // Registers the request's newly full blocks (tokens [0, num_computed)) so
  // later requests can hit them.
  void cache_full_blocks(KVRequestState& state, const std::vector<int32_t>& tokens,
                         int64_t num_computed);

  // Releases every block the request holds (its tail blocks first).
  void free(KVRequestState& state);
  // Releases the pages past those holding positions [0, num_tokens) in
  // every group (a speculative step's rejected draft positions that
  // spanned into new pages). Those pages hold no full computed block, so
  // none is in the prefix cache. A request that lost pages gets a new
  // generation: a copy of its block tables must be taken again.
  void free_tail(KVRequestState& state, int64_t num_tokens);

  // Prefix-cache counters: prompt tokens looked up and found.
  int64_t queried_tokens() const { return queried_tokens_; }
  int64_t hit_tokens() const { return hit_tokens_; }

 private:
  BlockPool& pool_of(size_t g) { return pools_[plan_.groups[g].pool]; }
  const BlockPool& pool_of(size_t g) const { return pools_[plan_.groups[g].pool]; }
  // Key of sub-page `sub` of a block hashed `hash` in group g's pool.
  static BlockHash page_key(const BlockHash& hash, size_t g, int32_t sub);

  KVCachePlan plan_;
  int32_t block_size_;
  bool prefix_caching_;
  bool drop_last_hit_block_ = false;
  std::vector<BlockPool> pools_;
  int64_t queried_tokens_ = 0, hit_tokens_ = 0;
  uint64_t next_generation_ = 0;
};

}  // namespace pagoda
