// The KV-cache manager's prefix-cache hit rule across layer groups: a full
// group needs the whole prefix cached, a sliding group of window W only the
// blocks the next query can see, and a hybrid model takes the longest
// prefix every group can serve.
#include <gtest/gtest.h>

#include <numeric>

#include "kv/kv_cache_manager.h"

namespace pagoda {
namespace {

constexpr int32_t kBlockSize = 4;

// A plan for one cache per layer with the given windows (0 = full), as a
// dense model's K (or V) caches would declare them.
KVCachePlan plan_for_windows(const std::vector<int64_t>& windows) {
  std::vector<LayerKVCache> caches;
  for (size_t l = 0; l < windows.size(); ++l) {
    caches.push_back({static_cast<int32_t>(l), "k", {.sliding_window = windows[l], .entry_bytes = 8, .format = "k"}});
  }
  return plan_kv_cache(caches, kBlockSize);
}

std::vector<int32_t> tokens(int n, int32_t first = 100) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

// Runs a request over `prompt` one block per step, as the scheduler does
// (allocate, compute, cache), then frees it: its blocks stay cached.
void run_and_free(KVCacheManager& kv, const std::vector<int32_t>& prompt) {
  KVRequestState state;
  int64_t computed = kv.take_cached_prefix(state, prompt);
  while (computed < static_cast<int64_t>(prompt.size())) {
    const int64_t next = std::min<int64_t>(computed + kBlockSize, prompt.size());
    ASSERT_TRUE(kv.allocate(state, computed, next));
    computed = next;
    kv.cache_full_blocks(state, prompt, computed);
  }
  kv.free(state);
}

// Takes `n` blocks from the head of the free queue and gives them back at
// the tail: the n least recently freed blocks lose their cached content.
void evict_oldest(KVCacheManager& kv, int32_t n) {
  KVRequestState state;
  ASSERT_TRUE(kv.allocate(state, 0, static_cast<int64_t>(n) * kBlockSize));
  kv.free(state);
}

TEST(KVCacheManager, FullGroupHitShrinksFromTheTail) {
  // 41 tokens fill 10 blocks and start an 11th: the pool holds exactly one request.
  KVCacheManager kv(plan_for_windows({0, 0}), 11, true);
  const auto prompt = tokens(41);
  run_and_free(kv, prompt);
  KVRequestState state;
  EXPECT_EQ(kv.take_cached_prefix(state, prompt), 40);
  kv.free(state);
  // The LRU rule evicts the request's last blocks first (10, then 9).
  evict_oldest(kv, 2);
  KVRequestState again;
  EXPECT_EQ(kv.take_cached_prefix(again, prompt), 36);
  kv.free(again);
  evict_oldest(kv, 11);
  KVRequestState none;
  EXPECT_EQ(kv.take_cached_prefix(none, prompt), 0);
  kv.free(none);
  EXPECT_EQ(kv.num_free_blocks(), 11);
}

TEST(KVCacheManager, SlidingGroupNeedsOnlyItsWindow) {
  // Window 8: the query at position 40 sees positions 33..40, i.e. blocks
  // 8 and 9 of the hit (block 10 holds the query itself).
  KVCacheManager kv(plan_for_windows({8}), 12, true);
  const auto prompt = tokens(41);
  run_and_free(kv, prompt);
  // The request held at most 4 blocks at once; blocks 0..7 went back to the
  // pool first and are the first evicted.
  EXPECT_EQ(kv.num_free_blocks(), 12);
  evict_oldest(kv, 8);
  KVRequestState state;
  EXPECT_EQ(kv.take_cached_prefix(state, prompt), 40);
  ASSERT_EQ(state.block_tables.size(), 1u);
  ASSERT_EQ(state.block_tables[0].size(), 10u);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(state.block_tables[0][i], -1) << i;  // outside the window
  EXPECT_GE(state.block_tables[0][8], 0);
  EXPECT_GE(state.block_tables[0][9], 0);
  EXPECT_EQ(kv.num_free_blocks(), 10);  // only the two window blocks are taken
  kv.free(state);
  EXPECT_EQ(kv.num_free_blocks(), 12);
}

TEST(KVCacheManager, HybridHitIsTheLongestPrefixEveryGroupServes) {
  // Full layers 0 and 2, sliding (window 8) layers 1 and 3.
  KVCacheManager kv(plan_for_windows({0, 8, 0, 8}), 64, true);
  ASSERT_EQ(kv.groups().size(), 2u);
  const auto prompt = tokens(41);
  run_and_free(kv, prompt);
  {
    KVRequestState state;
    EXPECT_EQ(kv.take_cached_prefix(state, prompt), 40);
    kv.free(state);
  }
  // A longer prompt with the same start: the full group hits 10 blocks, and
  // the sliding group can serve a hit of 10 blocks too (its window blocks 8
  // and 9 are cached), but nothing beyond: the hit stays 40 tokens.
  auto longer = prompt;
  longer.resize(60, 7);
  {
    KVRequestState state;
    EXPECT_EQ(kv.take_cached_prefix(state, longer), 40);
    EXPECT_EQ(state.num_cached_blocks, 10);
    kv.free(state);
  }
  // A prompt that diverges inside block 9: the full group serves 9 blocks;
  // the sliding group must then have blocks 7 and 8 (positions 29..35).
  auto diverging = prompt;
  diverging[38] = 5;
  {
    KVRequestState state;
    EXPECT_EQ(kv.take_cached_prefix(state, diverging), 36);
    EXPECT_EQ(state.block_tables[1][6], -1);
    EXPECT_GE(state.block_tables[1][7], 0);
    kv.free(state);
  }
  EXPECT_EQ(kv.num_free_blocks(), 64);
  EXPECT_NO_THROW(kv.check_invariants());
}

TEST(KVCacheManager, GroupsCacheTheSameTokensSeparately) {
  // Each group holds its own layers' K/V for a block, so a hit must hand
  // each group its own block (were the pool keyed by tokens alone, the
  // second group would be served the first group's block).
  KVCacheManager kv(plan_for_windows({0, 64}), 32, true);
  const auto prompt = tokens(21);
  run_and_free(kv, prompt);
  KVRequestState state;
  ASSERT_EQ(kv.take_cached_prefix(state, prompt), 20);
  for (int i = 0; i < 5; ++i) {
    ASSERT_GE(state.block_tables[1][i], 0);
    EXPECT_NE(state.block_tables[0][i], state.block_tables[1][i]) << i;
  }
  kv.free(state);
  EXPECT_NO_THROW(kv.check_invariants());
}

}  // namespace
}  // namespace pagoda
