#include "kv/kv_cache_manager.h"

#include <algorithm>

#include "core/error.h"

namespace pagoda {

std::vector<KVCacheGroup> make_kv_cache_groups(const std::vector<int64_t>& layer_sliding_window) {
  std::vector<KVCacheGroup> groups;
  for (size_t l = 0; l < layer_sliding_window.size(); ++l) {
    auto it = std::find_if(groups.begin(), groups.end(), [&](const KVCacheGroup& g) {
      return g.sliding_window == layer_sliding_window[l];
    });
    if (it == groups.end()) {
      groups.push_back({layer_sliding_window[l], {}});
      it = groups.end() - 1;
    }
    it->layers.push_back(static_cast<int32_t>(l));
  }
  return groups;
}

KVCacheManager::KVCacheManager(std::vector<KVCacheGroup> groups, int32_t num_blocks,
                               int32_t block_size, bool enable_prefix_caching)
    : groups_(std::move(groups)),
      block_size_(block_size),
      // Prefix hits must be valid for every group; sliding-window groups
      // would need their own hit rule, so caching is limited to models whose
      // layers all attend fully.
      prefix_caching_(enable_prefix_caching &&
                      std::all_of(groups_.begin(), groups_.end(),
                                  [](const KVCacheGroup& g) { return g.sliding_window == 0; })),
      pool_(num_blocks, prefix_caching_) {}

int64_t KVCacheManager::first_needed_position(const KVCacheGroup& g, int64_t num_computed) const {
  // The next query sits at position num_computed and sees W keys back.
  return g.sliding_window > 0 ? std::max<int64_t>(0, num_computed - g.sliding_window + 1) : 0;
}

int64_t KVCacheManager::take_cached_prefix(KVRequestState& state, const std::vector<int32_t>& tokens) {
  state.block_tables.assign(groups_.size(), {});
  if (!prefix_caching_) return 0;
  // Leave the last token uncomputed: its logits are needed.
  const auto max_blocks = static_cast<int64_t>((tokens.size() - 1) / block_size_);
  state.block_hashes = hash_full_blocks(tokens, block_size_);
  std::vector<int32_t> hits;
  for (int64_t i = 0; i < max_blocks; ++i) {
    const auto b = pool_.lookup(state.block_hashes[i]);
    if (!b) break;
    hits.push_back(*b);
  }
  queried_tokens_ += static_cast<int64_t>(tokens.size());
  hit_tokens_ += static_cast<int64_t>(hits.size()) * block_size_;
  pool_.touch(hits);
  state.block_tables[0] = hits;  // one group: caching is on only for all-full models
  state.num_cached_blocks = static_cast<int64_t>(hits.size());
  return static_cast<int64_t>(hits.size()) * block_size_;
}

bool KVCacheManager::allocate(KVRequestState& state, int64_t num_computed, int64_t num_tokens) {
  if (state.block_tables.size() != groups_.size()) state.block_tables.resize(groups_.size());
  const int64_t needed_blocks = (num_tokens + block_size_ - 1) / block_size_;
  // Blocks that fell out of every future query's window go back first.
  for (size_t g = 0; g < groups_.size(); ++g) {
    if (groups_[g].sliding_window == 0) continue;
    const int64_t first_block = first_needed_position(groups_[g], num_computed) / block_size_;
    auto& table = state.block_tables[g];
    std::vector<int32_t> released;
    for (int64_t i = 0; i < std::min<int64_t>(first_block, static_cast<int64_t>(table.size())); ++i) {
      if (table[i] >= 0) {
        released.push_back(table[i]);
        table[i] = -1;
      }
    }
    std::reverse(released.begin(), released.end());
    pool_.free(released);
  }
  int64_t missing = 0;
  for (const auto& table : state.block_tables) {
    missing += std::max<int64_t>(0, needed_blocks - static_cast<int64_t>(table.size()));
  }
  if (missing > pool_.num_free()) return false;
  for (auto& table : state.block_tables) {
    const auto have = static_cast<int64_t>(table.size());
    if (needed_blocks > have) {
      PAGODA_CHECK(pool_.allocate(static_cast<int32_t>(needed_blocks - have), &table), "pool short");
    }
  }
  return true;
}

void KVCacheManager::cache_full_blocks(KVRequestState& state, const std::vector<int32_t>& tokens,
                                       int64_t num_computed) {
  if (!prefix_caching_) return;
  const int64_t full = num_computed / block_size_;
  BlockHash parent = state.block_hashes.empty() ? BlockHash{} : state.block_hashes.back();
  for (auto i = static_cast<int64_t>(state.block_hashes.size()); i < full; ++i) {
    parent = hash_block(parent, std::span<const int32_t>(tokens).subspan(i * block_size_, block_size_));
    state.block_hashes.push_back(parent);
  }
  for (int64_t i = state.num_cached_blocks; i < full; ++i) {
    pool_.cache(state.block_tables[0][i], state.block_hashes[i]);
  }
  state.num_cached_blocks = std::max(state.num_cached_blocks, full);
}

void KVCacheManager::free(KVRequestState& state) {
  for (auto& table : state.block_tables) {
    std::vector<int32_t> order;
    for (auto it = table.rbegin(); it != table.rend(); ++it) {
      if (*it >= 0) order.push_back(*it);
    }
    pool_.free(order);
    table.clear();
  }
  state.block_hashes.clear();
  state.num_cached_blocks = 0;
}

}  // namespace pagoda
