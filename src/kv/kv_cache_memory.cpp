#include "kv/kv_cache_memory.h"

#include <algorithm>
#include <cstring>

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

void KVCacheMemory::fill_pages(const KVCachePlan& plan,
                               const std::vector<std::vector<int32_t>>& block_tables,
                               uint64_t seed) {
  PAGODA_CHECK(block_tables.size() == plan.groups.size(), "fill_pages: {} block tables, {} groups",
               block_tables.size(), plan.groups.size());
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;  // never 0 for xorshift
  if (x == 0) x = 1;
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    const KVCacheGroup& group = plan.groups[g];
    const int64_t page_bytes = plan.pools[group.pool].page_bytes;
    for (size_t i = 0; i < group.tensors.size(); ++i) {
      auto* base = static_cast<uint8_t*>(storage_[group.pool]->slot(static_cast<int64_t>(i)));
      for (const int32_t block : block_tables[g]) {
        if (block < 0) continue;  // released (before a sliding window)
        uint8_t* page = base + block * page_bytes;
        for (int64_t b = 0; b < page_bytes; b += 8) {
          x ^= x << 13;
          x ^= x >> 7;
          x ^= x << 17;
          // Eight bytes of 0x30 | (4 random bits).
          const uint64_t v = (x & 0x0F0F0F0F0F0F0F0Full) | 0x3030303030303030ull;
          std::memcpy(page + b, &v, static_cast<size_t>(std::min<int64_t>(8, page_bytes - b)));
        }
      }
    }
  }
}

}  // namespace pagoda
