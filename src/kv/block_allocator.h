// A fixed pool of KV-cache block ids handed out to sequences and returned
// when they finish or are preempted. (Prefix caching builds on this later.)
#pragma once

#include <cstdint>
#include <vector>

namespace pagoda {

class BlockAllocator {
 public:
  explicit BlockAllocator(int32_t num_blocks);

  int32_t num_blocks() const { return num_blocks_; }
  int32_t num_free() const { return static_cast<int32_t>(free_.size()); }

  // Takes n blocks; returns false (taking none) when fewer than n are free.
  bool allocate(int32_t n, std::vector<int32_t>* out);
  // Returns blocks to the pool; a block freed twice is an InternalError.
  void free(const std::vector<int32_t>& blocks);

 private:
  int32_t num_blocks_;
  std::vector<int32_t> free_;    // stack of free ids
  std::vector<uint8_t> in_use_;  // per block, to catch double frees
};

}  // namespace pagoda
