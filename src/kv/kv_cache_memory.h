// The KV cache's memory for a plan (kv/kv_cache_plan.h): one KVStorage per
// pool, and the view a model reads it through (each layer's caches, in the
// order the model declared them, with the group that addresses them).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "kv/kv_cache_plan.h"
#include "kv/kv_storage.h"

namespace pagoda {

// What a model sees of the cache: for each layer, each of its caches in
// declaration order (CausalLM::kv_cache_specs), an array of pages (one per
// block id, page_bytes apart) and the group whose block tables and slot
// mapping (BatchMetadata::kv_groups) address it.
struct KVCacheView {
  struct Cache {
    void* data = nullptr;
    int32_t group = 0;
    // The distance from one page to the next: the pool's page, which may be
    // larger than the spec's own page (a page-size bucket, kv_cache_plan.h;
    // the entries sit at its front); and the token positions one page
    // covers (the group's block size: a page holds block_size /
    // compress_ratio entries).
    int64_t page_bytes = 0;
    int32_t block_size = 0;
  };
  int32_t block_size = 16;   // the engine's block size (prefix-cache granularity)
  DType dtype = DType::F32;  // element type the caches were declared for
  std::vector<std::vector<Cache>> layers;  // [layer][cache]
};

class KVCacheMemory {
 public:
  // Reserves num_blocks[p] pages in every slot of pool p of the plan.
  KVCacheMemory(const KVCachePlan& plan, const std::vector<int64_t>& num_blocks, DType dtype);

  const KVCacheView& view() const { return view_; }
  size_t bytes() const;
  // Writes zeros over every page (KVStorage::prefault).
  void prefault();

 private:
  std::vector<std::unique_ptr<KVStorage>> storage_;  // one per pool
  KVCacheView view_;
};

}  // namespace pagoda
