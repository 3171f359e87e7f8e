// The pool of KV-cache blocks with automatic prefix caching, after vLLM v1:
// every block has a reference count; unreferenced blocks wait in a free
// queue (an O(1) doubly linked list) whose head is evicted first; full
// blocks may carry a content hash and be found again by it until evicted.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "kv/block_hash.h"

namespace pagoda {

class BlockPool {
 public:
  BlockPool(int32_t num_blocks, bool enable_caching);

  int32_t num_blocks() const { return static_cast<int32_t>(blocks_.size()); }
  // Blocks not referenced by any request (cached or not): what can be allocated.
  int32_t num_free() const { return num_free_; }
  bool caching_enabled() const { return enable_caching_; }

  // Takes n blocks from the head of the free queue (least recently freed
  // first), dropping any cached hash they carry; each gets ref count 1.
  // Returns false, taking nothing, when fewer than n are free.
  bool allocate(int32_t n, std::vector<int32_t>* out);

  // The cached block holding `hash`, if any.
  std::optional<int32_t> lookup(const BlockHash& hash) const;
  // A request starts using cached blocks: ref count + 1 (leaving the free
  // queue when it was 0).
  void touch(const std::vector<int32_t>& blocks);
  // Marks a full block as holding `hash` (no-op when caching is off or the
  // hash is already cached in another block).
  void cache(int32_t block, const BlockHash& hash);

  // Drops one reference from each block, in the given order; blocks that
  // reach zero join the free queue tail in that order. Pass a request's
  // blocks last-to-first so its tail blocks are evicted before its prefix.
  void free(const std::vector<int32_t>& blocks_in_eviction_order);

  int32_t ref_count(int32_t block) const { return blocks_[block].ref_count; }
  // Free-queue order, head first (tests check the LRU rule with it).
  std::vector<int32_t> free_queue_order() const;
  // Verifies internal invariants; throws InternalError if any is broken.
  void check_invariants() const;

 private:
  struct Block {
    int32_t ref_count = 0;
    std::optional<BlockHash> hash;
    int32_t prev = -1, next = -1;  // free-queue links (-1: none)
    bool in_free_queue = false;
  };
  void queue_push_back(int32_t b);
  void queue_remove(int32_t b);
  void evict_hash(int32_t b);

  std::vector<Block> blocks_;
  int32_t head_ = -1, tail_ = -1, num_free_ = 0;
  bool enable_caching_;
  std::unordered_map<BlockHash, int32_t, BlockHashHasher> cached_;
};

}  // namespace pagoda
