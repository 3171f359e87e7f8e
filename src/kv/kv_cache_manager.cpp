#include "kv/kv_cache_manager.h"

#include <algorithm>
#include <climits>
#include <optional>

#include "core/error.h"

namespace pagoda {

KVCacheManager::KVCacheManager(KVCachePlan plan, const std::vector<int32_t>& num_blocks,
                               bool enable_prefix_caching)
    : plan_(std::move(plan)), block_size_(plan_.block_size), prefix_caching_(enable_prefix_caching) {
  PAGODA_CHECK(!plan_.pools.empty(), "a KV cache plan without pools");
  PAGODA_CHECK(num_blocks.size() == plan_.pools.size(), "{} block counts for {} pools",
               num_blocks.size(), plan_.pools.size());
  for (int32_t n : num_blocks) pools_.emplace_back(n, prefix_caching_);
}

KVCacheManager::KVCacheManager(KVCachePlan plan, int32_t num_blocks, bool enable_prefix_caching)
    : KVCacheManager(plan, std::vector<int32_t>(plan.pools.size(), num_blocks),
                     enable_prefix_caching) {}

int32_t KVCacheManager::num_blocks() const {
  int64_t total = 0;
  for (const BlockPool& p : pools_) total += p.num_blocks();
  return static_cast<int32_t>(std::min<int64_t>(total, INT32_MAX));
}

int32_t KVCacheManager::num_free_blocks() const {
  int64_t total = 0;
  for (const BlockPool& p : pools_) total += p.num_free();
  return static_cast<int32_t>(std::min<int64_t>(total, INT32_MAX));
}

void KVCacheManager::check_invariants() const {
  for (const BlockPool& p : pools_) p.check_invariants();
}

BlockHash KVCacheManager::page_key(const BlockHash& hash, size_t g, int32_t sub) {
  // The groups hold different caches for the same tokens (and may share a
  // pool), and a group of small pages holds several pages per block: each
  // page gets its own key. Group 0's whole-block pages keep the block hash.
  if (g == 0 && sub == 0) return hash;
  const int32_t sub_index[1] = {sub};
  return hash_block(hash, sub_index, static_cast<uint64_t>(g));
}

namespace {

// Which pages of a group the pool still caches for one request's block
// hashes, looked up on demand (a sliding group of small pages only ever
// asks about the pages near each candidate hit length).
class CachedPages {
 public:
  CachedPages(const BlockPool& pool, const std::vector<BlockHash>& hashes, size_t group,
              int32_t pages_per_block, int64_t num_pages,
              BlockHash (*key)(const BlockHash&, size_t, int32_t))
      : pool_(pool), hashes_(hashes), group_(group), ppb_(pages_per_block), key_(key),
        known_(num_pages, -1) {}
  std::optional<int32_t> block(int64_t page) const {
    return pool_.lookup(key_(hashes_[page / ppb_], group_, static_cast<int32_t>(page % ppb_)));
  }
  bool cached(int64_t page) {
    if (known_[page] < 0) known_[page] = block(page).has_value() ? 1 : 0;
    return known_[page] == 1;
  }

 private:
  const BlockPool& pool_;
  const std::vector<BlockHash>& hashes_;
  size_t group_;
  int32_t ppb_;
  BlockHash (*key_)(const BlockHash&, size_t, int32_t);
  std::vector<int8_t> known_;
};

}  // namespace

int64_t KVCacheManager::take_cached_prefix(KVRequestState& state,
                                           const std::vector<int32_t>& tokens) {
  const size_t num_groups = plan_.groups.size();
  state.block_tables.assign(num_groups, {});
  state.generation = ++next_generation_;
  if (!prefix_caching_) return 0;
  // Leave the last token uncomputed: its logits are needed.
  const auto max_blocks = static_cast<int64_t>((tokens.size() - 1) / block_size_);
  state.block_hashes = hash_full_blocks(tokens, block_size_);
  std::vector<CachedPages> cached;
  for (size_t g = 0; g < num_groups; ++g) {
    const int32_t ppb = plan_.groups[g].pages_per_block(block_size_);
    cached.emplace_back(pool_of(g), state.block_hashes, g, ppb, max_blocks * ppb, &page_key);
  }
  // The longest hit of at most `bound` blocks group g serves: it must hold
  // every page the query at position n * B reads, the whole prefix for full
  // attention, the pages of the last W - 1 positions for a window of W
  // (vLLM's hybrid rule).
  auto longest_hit = [&](size_t g, int64_t bound) -> int64_t {
    const KVCacheGroup& group = plan_.groups[g];
    const int32_t b = group.block_size, ppb = group.pages_per_block(block_size_);
    if (group.spec.sliding_window == 0) {
      int64_t page = 0;
      while (page < bound * ppb && cached[g].cached(page)) ++page;
      return page / ppb;
    }
    for (int64_t n = bound; n > 0; --n) {
      const int64_t first = group.spec.first_needed_position(n * block_size_) / b;
      bool all = true;
      for (int64_t page = n * ppb - 1; page >= first && all; --page) all = cached[g].cached(page);
      if (all) return n;
    }
    return 0;
  };
  // Each group's longest hit within the current bound lowers it until all
  // agree; no length above a common one is ever skipped, so the result is
  // the longest.
  auto longest_common_hit = [&](int64_t num_blocks) {
    for (bool lowered = true; lowered;) {
      lowered = false;
      for (size_t g = 0; g < num_groups; ++g) {
        const int64_t n = longest_hit(g, num_blocks);
        if (n < num_blocks) {
          num_blocks = n;
          lowered = true;
        }
      }
    }
    return num_blocks;
  };
  int64_t num_blocks = longest_common_hit(max_blocks);
  // One block shorter, agreed on again (a sliding group's window moves).
  if (drop_last_hit_block_ && num_blocks > 0) num_blocks = longest_common_hit(num_blocks - 1);
  for (size_t g = 0; g < num_groups; ++g) {
    const KVCacheGroup& group = plan_.groups[g];
    const int32_t ppb = group.pages_per_block(block_size_);
    const int64_t first =
        group.spec.first_needed_position(num_blocks * block_size_) / group.block_size;
    auto& table = state.block_tables[g];
    table.assign(num_blocks * ppb, -1);  // pages before the window stay released
    std::vector<int32_t> hits;
    for (int64_t page = first; page < num_blocks * ppb; ++page) {
      table[page] = *cached[g].block(page);
      hits.push_back(table[page]);
    }
    pool_of(g).touch(hits);
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
  auto needed_pages = [&](size_t g) {
    const int64_t b = plan_.groups[g].block_size;
    return (num_tokens + b - 1) / b;
  };
  // Pages that fell out of every future query's window go back first.
  for (size_t g = 0; g < num_groups; ++g) {
    const KVCacheSpec& spec = plan_.groups[g].spec;
    if (spec.sliding_window == 0) continue;
    const int64_t first_block =
        spec.first_needed_position(num_computed) / plan_.groups[g].block_size;
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
        std::max<int64_t>(0, needed_pages(g) - static_cast<int64_t>(state.block_tables[g].size()));
  }
  for (size_t p = 0; p < pools_.size(); ++p) {
    if (missing[p] > pools_[p].num_free()) return false;
  }
  for (size_t g = 0; g < num_groups; ++g) {
    auto& table = state.block_tables[g];
    const auto have = static_cast<int64_t>(table.size());
    const int64_t need = needed_pages(g);
    if (need > have) {
      PAGODA_CHECK(pool_of(g).allocate(static_cast<int32_t>(need - have), &table),
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
    const int32_t ppb = plan_.groups[g].pages_per_block(block_size_);
    for (int64_t i = state.num_cached_blocks; i < full; ++i) {
      for (int32_t sub = 0; sub < ppb; ++sub) {
        // -1: a page before the window at a prefix hit, or one a sliding
        // group released before its block was full; no hit needs it.
        const int64_t page = i * ppb + sub;
        if (table[page] >= 0) {
          pool_of(g).cache(table[page], page_key(state.block_hashes[i], g, sub));
        }
      }
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

void KVCacheManager::free_tail(KVRequestState& state, int64_t num_tokens) {
  bool released = false;
  for (size_t g = 0; g < state.block_tables.size(); ++g) {
    auto& table = state.block_tables[g];
    const int64_t b = plan_.groups[g].block_size;
    const auto keep = static_cast<size_t>((num_tokens + b - 1) / b);
    if (table.size() <= keep) continue;
    PAGODA_CHECK(static_cast<int64_t>(keep) >= state.num_cached_blocks * plan_.groups[g].pages_per_block(block_size_),
                 "freeing a cached page");
    std::vector<int32_t> order;
    for (size_t i = table.size(); i-- > keep;) {
      if (table[i] >= 0) order.push_back(table[i]);
    }
    pool_of(g).free(order);
    table.resize(keep);
    released = true;
  }
  if (released) state.generation = ++next_generation_;
}

}  // namespace pagoda
