#include "kv/kv_cache_manager.h"

#include <algorithm>

#include "core/error.h"

namespace pagoda {

KVCacheManager::KVCacheManager(KVCachePlan plan, int32_t num_blocks, bool enable_prefix_caching)
    : plan_(std::move(plan)), block_size_(plan_.block_size), prefix_caching_(enable_prefix_caching) {
  PAGODA_CHECK(!plan_.pools.empty(), "a KV cache plan without pools");
  for (size_t p = 0; p < plan_.pools.size(); ++p) pools_.emplace_back(num_blocks, prefix_caching_);
}

int32_t KVCacheManager::num_free_blocks() const {
  int32_t fewest = pools_.front().num_free();
  for (const BlockPool& p : pools_) fewest = std::min(fewest, p.num_free());
  return fewest;
}

void KVCacheManager::check_invariants() const {
  for (const BlockPool& p : pools_) p.check_invariants();
}

namespace {

// A block's key in the pool for group g: the groups hold different caches
// for the same tokens, so each caches them under its own key (groups may
// share a pool).
BlockHash group_key(const BlockHash& hash, size_t g) {
  return g == 0 ? hash : hash_block(hash, {}, static_cast<uint64_t>(g));
}

}  // namespace

int64_t KVCacheManager::longest_hit(size_t g, const std::vector<bool>& cached,
                                    int64_t max_blocks) const {
  // misses[i] = cache misses among blocks [0, i).
  std::vector<int64_t> misses(max_blocks + 1, 0);
  for (int64_t i = 0; i < max_blocks; ++i) misses[i + 1] = misses[i] + (cached[i] ? 0 : 1);
  for (int64_t n = max_blocks; n > 0; --n) {
    // The next query sits at position n * block_size.
    const int64_t first = plan_.groups[g].spec.first_needed_position(n * block_size_) / block_size_;
    if (misses[n] == misses[first]) return n;
  }
  return 0;
}

int64_t KVCacheManager::take_cached_prefix(KVRequestState& state,
                                           const std::vector<int32_t>& tokens) {
  const size_t num_groups = plan_.groups.size();
  state.block_tables.assign(num_groups, {});
  state.generation = ++next_generation_;
  if (!prefix_caching_) return 0;
  // Leave the last token uncomputed: its logits are needed.
  const auto max_blocks = static_cast<int64_t>((tokens.size() - 1) / block_size_);
  state.block_hashes = hash_full_blocks(tokens, block_size_);
  std::vector<std::vector<bool>> cached(num_groups, std::vector<bool>(max_blocks));
  for (size_t g = 0; g < num_groups; ++g) {
    for (int64_t i = 0; i < max_blocks; ++i) {
      cached[g][i] = pool_of(g).lookup(group_key(state.block_hashes[i], g)).has_value();
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
    for (size_t g = 0; g < num_groups; ++g) {
      const int64_t n = longest_hit(g, cached[g], num_blocks);
      if (n < num_blocks) {
        num_blocks = n;
        lowered = true;
      }
    }
  }
  for (size_t g = 0; g < num_groups; ++g) {
    const int64_t first =
        plan_.groups[g].spec.first_needed_position(num_blocks * block_size_) / block_size_;
    auto& table = state.block_tables[g];
    table.assign(num_blocks, -1);  // blocks before the window stay released
    std::vector<int32_t> hits;
    BlockPool& pool = pool_of(g);
    for (int64_t i = first; i < num_blocks; ++i) {
      table[i] = *pool.lookup(group_key(state.block_hashes[i], g));
      hits.push_back(table[i]);
    }
    pool.touch(hits);
  }
  queried_tokens_ += static_cast<int64_t>(tokens.size());
  hit_tokens_ += num_blocks * block_size_;
  state.num_cached_blocks = num_blocks;
  return num_blocks * block_size_;
}

bool KVCacheManager::allocate(KVRequestState& state, int64_t num_computed, int64_t num_tokens) {
  const size_t num_groups = plan_.groups.size();
  if (state.block_tables.size() != num_groups) state.block_tables.resize(num_groups);
  // A request holding no block is being admitted (with or without
  // take_cached_prefix): a new generation (kv_cache_manager.h).
  if (std::all_of(state.block_tables.begin(), state.block_tables.end(),
                  [](const std::vector<int32_t>& t) { return t.empty(); })) {
    state.generation = ++next_generation_;
  }
  const int64_t needed_blocks = (num_tokens + block_size_ - 1) / block_size_;
  // Blocks that fell out of every future query's window go back first.
  for (size_t g = 0; g < num_groups; ++g) {
    const KVCacheSpec& spec = plan_.groups[g].spec;
    if (spec.sliding_window == 0) continue;
    const int64_t first_block = spec.first_needed_position(num_computed) / block_size_;
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
    pool_of(g).free(released);
  }
  std::vector<int64_t> missing(pools_.size(), 0);
  for (size_t g = 0; g < num_groups; ++g) {
    missing[plan_.groups[g].pool] +=
        std::max<int64_t>(0, needed_blocks - static_cast<int64_t>(state.block_tables[g].size()));
  }
  for (size_t p = 0; p < pools_.size(); ++p) {
    if (missing[p] > pools_[p].num_free()) return false;
  }
  for (size_t g = 0; g < num_groups; ++g) {
    auto& table = state.block_tables[g];
    const auto have = static_cast<int64_t>(table.size());
    if (needed_blocks > have) {
      PAGODA_CHECK(pool_of(g).allocate(static_cast<int32_t>(needed_blocks - have), &table),
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
  for (size_t g = 0; g < plan_.groups.size(); ++g) {
    const auto& table = state.block_tables[g];
    for (int64_t i = state.num_cached_blocks; i < full; ++i) {
      // A sliding group releases a block only after it was cached, so -1
      // here is a block it never held (before its window at a prefix hit).
      if (table[i] >= 0) pool_of(g).cache(table[i], group_key(state.block_hashes[i], g));
    }
  }
  state.num_cached_blocks = std::max(state.num_cached_blocks, full);
}

void KVCacheManager::free(KVRequestState& state) {
  for (size_t g = 0; g < state.block_tables.size(); ++g) {
    auto& table = state.block_tables[g];
    std::vector<int32_t> order;
    for (auto it = table.rbegin(); it != table.rend(); ++it) {
      if (*it >= 0) order.push_back(*it);
    }
    pool_of(g).free(order);
    table.clear();
  }
  state.block_hashes.clear();
  state.num_cached_blocks = 0;
}

}  // namespace pagoda
