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
      prefix_caching_(enable_prefix_caching),
      pool_(num_blocks, prefix_caching_) {}

namespace {

// A block's key in the pool for group g: the groups hold different layers'
// K/V for the same tokens, so each caches them under its own key.
BlockHash group_key(const BlockHash& hash, size_t g) {
  return g == 0 ? hash : hash_block(hash, {}, static_cast<uint64_t>(g));
}

}  // namespace

int64_t KVCacheManager::first_needed_position(const KVCacheGroup& g, int64_t num_computed) const {
  // The next query sits at position num_computed and sees W keys back.
  return g.sliding_window > 0 ? std::max<int64_t>(0, num_computed - g.sliding_window + 1) : 0;
}

int64_t KVCacheManager::longest_hit(size_t g, const std::vector<bool>& cached,
                                    int64_t max_blocks) const {
  // misses[i] = cache misses among blocks [0, i).
  std::vector<int64_t> misses(max_blocks + 1, 0);
  for (int64_t i = 0; i < max_blocks; ++i) misses[i + 1] = misses[i] + (cached[i] ? 0 : 1);
  for (int64_t n = max_blocks; n > 0; --n) {
    const int64_t first = first_needed_position(groups_[g], n * block_size_) / block_size_;
    if (misses[n] == misses[first]) return n;
  }
  return 0;
}

int64_t KVCacheManager::take_cached_prefix(KVRequestState& state,
                                           const std::vector<int32_t>& tokens) {
  state.block_tables.assign(groups_.size(), {});
  if (!prefix_caching_) return 0;
  // Leave the last token uncomputed: its logits are needed.
  const auto max_blocks = static_cast<int64_t>((tokens.size() - 1) / block_size_);
  state.block_hashes = hash_full_blocks(tokens, block_size_);
  std::vector<std::vector<bool>> cached(groups_.size(), std::vector<bool>(max_blocks));
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (int64_t i = 0; i < max_blocks; ++i) {
      cached[g][i] = pool_.lookup(group_key(state.block_hashes[i], g)).has_value();
    }
  }
  // A hit of n blocks must hold, in every group, the K/V the query at
  // position n * block_size reads: the whole prefix for full attention, the
  // last W - 1 positions for a window of W (vLLM's hybrid rule). Each group's
  // longest hit within the current bound lowers it until all agree; no
  // length above a common one is ever skipped, so the result is the longest.
  int64_t num_blocks = max_blocks;
  for (bool lowered = true; lowered;) {
    lowered = false;
    for (size_t g = 0; g < groups_.size(); ++g) {
      const int64_t n = longest_hit(g, cached[g], num_blocks);
      if (n < num_blocks) {
        num_blocks = n;
        lowered = true;
      }
    }
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    const int64_t first = first_needed_position(groups_[g], num_blocks * block_size_) / block_size_;
    auto& table = state.block_tables[g];
    table.assign(num_blocks, -1);  // blocks before the window stay released
    std::vector<int32_t> hits;
    for (int64_t i = first; i < num_blocks; ++i) {
      table[i] = *pool_.lookup(group_key(state.block_hashes[i], g));
      hits.push_back(table[i]);
    }
    pool_.touch(hits);
  }
  queried_tokens_ += static_cast<int64_t>(tokens.size());
  hit_tokens_ += num_blocks * block_size_;
  state.num_cached_blocks = num_blocks;
  return num_blocks * block_size_;
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
    for (int64_t i = 0; i < std::min<int64_t>(first_block, static_cast<int64_t>(table.size()));
         ++i) {
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
      PAGODA_CHECK(pool_.allocate(static_cast<int32_t>(needed_blocks - have), &table),
                   "pool short");
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
    parent =
        hash_block(parent, std::span<const int32_t>(tokens).subspan(i * block_size_, block_size_));
    state.block_hashes.push_back(parent);
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    const auto& table = state.block_tables[g];
    for (int64_t i = state.num_cached_blocks; i < full; ++i) {
      // A sliding group releases a block only after it was cached, so -1
      // here is a block it never held (before its window at a prefix hit).
      if (table[i] >= 0) pool_.cache(table[i], group_key(state.block_hashes[i], g));
    }
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
