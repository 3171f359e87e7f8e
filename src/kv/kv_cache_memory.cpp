#include "kv/kv_cache_memory.h"

#include "core/error.h"

namespace pagoda {

KVCacheMemory::KVCacheMemory(const KVCachePlan& plan, const std::vector<int64_t>& num_blocks,
                             DType dtype) {
  PAGODA_CHECK(num_blocks.size() == plan.pools.size(), "{} block counts for {} pools",
               num_blocks.size(), plan.pools.size());
  for (size_t p = 0; p < plan.pools.size(); ++p) {
    storage_.push_back(std::make_unique<KVStorage>(plan.pools[p].num_slots, num_blocks[p],
                                                   plan.pools[p].page_bytes));
  }
  view_.block_size = plan.block_size;
  view_.dtype = dtype;
  view_.layers.resize(plan.layer_cache_group.size());
  for (size_t l = 0; l < view_.layers.size(); ++l) {
    view_.layers[l].resize(plan.layer_cache_group[l].size());
  }
  // A group's i-th tensor lives in slot i of its pool (kv_cache_plan.h).
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    const KVCacheGroup& group = plan.groups[g];
    for (size_t i = 0; i < group.tensors.size(); ++i) {
      const KVTensorRef& t = group.tensors[i];
      view_.layers[t.layer][t.cache] = {storage_[group.pool]->slot(static_cast<int64_t>(i)),
                                        static_cast<int32_t>(g), plan.pools[group.pool].page_bytes,
                                        group.block_size};
    }
  }
}

size_t KVCacheMemory::bytes() const {
  size_t total = 0;
  for (const auto& s : storage_) total += s->bytes();
  return total;
}

void KVCacheMemory::prefault() {
  for (const auto& s : storage_) s->prefault();
}

}  // namespace pagoda
