#include "kv/block_allocator.h"

#include "core/error.h"

namespace pagoda {

BlockAllocator::BlockAllocator(int32_t num_blocks)
    : num_blocks_(num_blocks), in_use_(num_blocks, 0) {
  free_.reserve(num_blocks);
  // Pop from the back, so hand out low ids first.
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

bool BlockAllocator::allocate(int32_t n, std::vector<int32_t>* out) {
  if (n > num_free()) return false;
  for (int32_t i = 0; i < n; ++i) {
    const int32_t b = free_.back();
    free_.pop_back();
    in_use_[b] = 1;
    out->push_back(b);
  }
  return true;
}

void BlockAllocator::free(const std::vector<int32_t>& blocks) {
  for (int32_t b : blocks) {
    PAGODA_CHECK(b >= 0 && b < num_blocks_ && in_use_[b], "freeing block {} not in use", b);
    in_use_[b] = 0;
    free_.push_back(b);
  }
}

}  // namespace pagoda
