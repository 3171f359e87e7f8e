// The memory behind one pool of the paged KV cache (kv/kv_cache_plan.h):
// num_slots arrays of num_blocks pages of page_bytes each, reserved once at
// start. What a page holds (K rows of a dense layer, MLA latents, ...) is
// the model's business.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/meminfo.h"

namespace pagoda {

class KVStorage {
 public:
  // Maps num_slots arrays of num_blocks * page_bytes bytes. The memory
  // comes from an anonymous mapping, so pages a run never touches cost
  // nothing (in 2 MiB steps where huge pages are on).
  KVStorage(int64_t num_slots, int64_t num_blocks, int64_t page_bytes);
  KVStorage(const KVStorage&) = delete;
  KVStorage& operator=(const KVStorage&) = delete;

  // Writes zeros over every page, in parallel (each kernel thread first
  // touches its share).
  void prefault();

  // The array of slot s: num_blocks pages, block b at b * page_bytes.
  void* slot(int64_t s) const { return memory_.data() + s * slot_bytes_; }
  size_t bytes() const { return memory_.size(); }

 private:
  HugePageBuffer memory_;
  int64_t slot_bytes_ = 0;
};

}  // namespace pagoda
