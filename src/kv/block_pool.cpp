#include "kv/block_pool.h"

#include "core/error.h"

namespace pagoda {

BlockPool::BlockPool(int32_t num_blocks, bool enable_caching)
    : blocks_(num_blocks), enable_caching_(enable_caching) {
  for (int32_t b = 0; b < num_blocks; ++b) queue_push_back(b);
}

void BlockPool::queue_push_back(int32_t b) {
  Block& blk = blocks_[b];
  blk.prev = tail_;
  blk.next = -1;
  if (tail_ >= 0) blocks_[tail_].next = b;
  tail_ = b;
  if (head_ < 0) head_ = b;
  blk.in_free_queue = true;
  ++num_free_;
}

void BlockPool::queue_remove(int32_t b) {
  Block& blk = blocks_[b];
  PAGODA_CHECK(blk.in_free_queue, "block {} is not in the free queue", b);
  if (blk.prev >= 0)
    blocks_[blk.prev].next = blk.next;
  else
    head_ = blk.next;
  if (blk.next >= 0)
    blocks_[blk.next].prev = blk.prev;
  else
    tail_ = blk.prev;
  blk.prev = blk.next = -1;
  blk.in_free_queue = false;
  --num_free_;
}

void BlockPool::evict_hash(int32_t b) {
  Block& blk = blocks_[b];
  if (!blk.hash) return;
  const auto it = cached_.find(*blk.hash);
  if (it != cached_.end() && it->second == b) cached_.erase(it);
  blk.hash.reset();
}

bool BlockPool::allocate(int32_t n, std::vector<int32_t>* out) {
  if (n > num_free_) return false;
  for (int32_t i = 0; i < n; ++i) {
    const int32_t b = head_;
    queue_remove(b);
    evict_hash(b);
    blocks_[b].ref_count = 1;
    out->push_back(b);
  }
  return true;
}

std::optional<int32_t> BlockPool::lookup(const BlockHash& hash) const {
  if (!enable_caching_) return std::nullopt;
  const auto it = cached_.find(hash);
  if (it == cached_.end()) return std::nullopt;
  return it->second;
}

void BlockPool::touch(const std::vector<int32_t>& blocks) {
  for (int32_t b : blocks) {
    if (blocks_[b].ref_count == 0) queue_remove(b);
    blocks_[b].ref_count++;
  }
}

void BlockPool::cache(int32_t block, const BlockHash& hash) {
  if (!enable_caching_ || blocks_[block].hash) return;
  if (cached_.emplace(hash, block).second) blocks_[block].hash = hash;
}

void BlockPool::free(const std::vector<int32_t>& blocks_in_eviction_order) {
  for (int32_t b : blocks_in_eviction_order) {
    Block& blk = blocks_[b];
    PAGODA_CHECK(blk.ref_count > 0, "freeing block {} with ref count 0 (double free)", b);
    if (--blk.ref_count == 0) {
      if (!enable_caching_) evict_hash(b);
      queue_push_back(b);
    }
  }
}

std::vector<int32_t> BlockPool::free_queue_order() const {
  std::vector<int32_t> order;
  for (int32_t b = head_; b >= 0; b = blocks_[b].next) order.push_back(b);
  return order;
}

void BlockPool::check_invariants() const {
  int32_t queued = 0;
  for (int32_t b = head_, prev = -1; b >= 0; prev = b, b = blocks_[b].next) {
    PAGODA_CHECK(blocks_[b].in_free_queue && blocks_[b].prev == prev, "free queue link at {}", b);
    PAGODA_CHECK(blocks_[b].ref_count == 0, "block {} queued with ref count {}", b,
                 blocks_[b].ref_count);
    ++queued;
  }
  PAGODA_CHECK(queued == num_free_, "free queue holds {} but count is {}", queued, num_free_);
  for (int32_t b = 0; b < num_blocks(); ++b) {
    const Block& blk = blocks_[b];
    PAGODA_CHECK(blk.ref_count >= 0, "negative ref count at {}", b);
    PAGODA_CHECK(blk.in_free_queue == (blk.ref_count == 0), "block {} ref {} queued {}", b,
                 blk.ref_count, blk.in_free_queue);
    if (blk.hash) {
      const auto it = cached_.find(*blk.hash);
      PAGODA_CHECK(it != cached_.end() && it->second == b, "block {} hash not in the map", b);
    }
  }
  for (const auto& [hash, b] : cached_) {
    PAGODA_CHECK(blocks_[b].hash && *blocks_[b].hash == hash, "map entry for block {} is stale", b);
  }
}

}  // namespace pagoda
