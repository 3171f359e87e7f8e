#include "kv/kv_cache_plan.h"

#include <algorithm>

#include "core/error.h"

namespace pagoda {

KVCachePlan plan_kv_cache(const std::vector<LayerKVCache>& caches, int32_t block_size) {
  if (block_size < 1) throw_input_error("block size must be >= 1, got {}", block_size);
  if (caches.empty()) throw_input_error("the model declares no KV cache");
  KVCachePlan plan;
  plan.block_size = block_size;
  for (const LayerKVCache& c : caches) {
    PAGODA_CHECK(c.layer >= 0 && c.spec.entry_bytes > 0, "bad cache '{}' of layer {}", c.name,
                 c.layer);
    if (static_cast<size_t>(c.layer) >= plan.layer_cache_group.size()) {
      plan.layer_cache_group.resize(c.layer + 1);
    }
    auto& layer_caches = plan.layer_cache_group[c.layer];
    const KVTensorRef ref{c.layer, static_cast<int32_t>(layer_caches.size())};
    auto it = std::find_if(plan.groups.begin(), plan.groups.end(),
                           [&](const KVCacheGroup& g) { return g.spec == c.spec; });
    if (it == plan.groups.end()) {
      KVCacheGroup g;
      g.spec = c.spec;
      const int64_t page = g.spec.page_bytes(block_size);  // checks the ratio
      auto pool = std::find_if(plan.pools.begin(), plan.pools.end(),
                               [&](const KVPoolPlan& p) { return p.page_bytes == page; });
      if (pool == plan.pools.end()) {
        plan.pools.push_back({page, 0});
        pool = plan.pools.end() - 1;
      }
      g.pool = static_cast<int32_t>(pool - plan.pools.begin());
      plan.groups.push_back(std::move(g));
      it = plan.groups.end() - 1;
    }
    it->tensors.push_back(ref);
    layer_caches.push_back(static_cast<int32_t>(it - plan.groups.begin()));
  }
  for (const KVCacheGroup& g : plan.groups) {
    KVPoolPlan& p = plan.pools[g.pool];
    p.num_slots = std::max(p.num_slots, static_cast<int32_t>(g.tensors.size()));
  }
  return plan;
}

int64_t KVCachePlan::bytes_per_block() const {
  int64_t total = 0;
  for (const KVPoolPlan& p : pools) total += p.num_slots * p.page_bytes;
  return total;
}

int64_t KVCachePlan::group_blocks(size_t g, int64_t num_tokens) const {
  const int64_t all = (num_tokens + block_size - 1) / block_size;
  const int64_t w = groups[g].spec.sliding_window;
  return w == 0 ? all : std::min(all, w / block_size + 2);
}

std::vector<int64_t> KVCachePlan::blocks_per_sequence(int64_t num_tokens) const {
  std::vector<int64_t> need(pools.size(), 0);
  for (size_t g = 0; g < groups.size(); ++g) need[groups[g].pool] += group_blocks(g, num_tokens);
  return need;
}

int64_t KVCachePlan::bytes_per_sequence(int64_t num_tokens) const {
  int64_t total = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    total += group_blocks(g, num_tokens) * pools[groups[g].pool].page_bytes *
             static_cast<int64_t>(groups[g].tensors.size());
  }
  return total;
}

int64_t KVCachePlan::min_blocks(int64_t num_tokens) const {
  const std::vector<int64_t> need = blocks_per_sequence(num_tokens);
  return need.empty() ? 0 : *std::max_element(need.begin(), need.end());
}

}  // namespace pagoda
