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
  // Fills every page the request holds, in each of its groups' tensors,
  // with pseudo-random bytes from `seed` (benchmarks: a context whose K/V
  // was never computed). Each byte is 0x30..0x3F, so whatever format a
  // cache stores (f32, bf16, fp8 e4m3 values, f32 or UE8M0 scales), every
  // element is a finite, normal, positive number: f32 / bf16 exponents
  // 0x60..0x7F (2^-31..2), e4m3 exponents 6..7 (0.5..1.9), UE8M0 2^-79..2^-64.
  // No NaN, infinity or denormal slows the step or poisons the logits, and
  // keys are distinct (scores do not tie).
  void fill_pages(const KVCachePlan& plan, const std::vector<std::vector<int32_t>>& block_tables,
                  uint64_t seed);

 private:
  std::vector<std::unique_ptr<KVStorage>> storage_;  // one per pool
  KVCacheView view_;
};

}  // namespace pagoda
