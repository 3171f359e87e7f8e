// The block pool: LRU eviction order of the seeds, hash chaining, ref
// counts, and randomized invariant checks.
#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "kv/block_hash.h"
#include "kv/block_pool.h"

namespace pagoda {
namespace {

TEST(BlockHash, ChainsOverTheWholePrefix) {
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8}, b = {9, 2, 3, 4, 5, 6, 7, 8};
  const auto ha = hash_full_blocks(a, 4), hb = hash_full_blocks(b, 4);
  ASSERT_EQ(ha.size(), 2u);
  EXPECT_NE(ha[0], hb[0]);
  EXPECT_NE(ha[1], hb[1]);  // same tokens in block 1, different prefix: no match
  EXPECT_EQ(hash_full_blocks(std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8, 9}, 4),
            ha);  // partial block ignored
  EXPECT_NE(hash_full_blocks(a, 4, /*extra_key=*/1)[0], ha[0]);
}

TEST(BlockPool, EvictionFollowsTheLruRule) {
  BlockPool pool(6, /*enable_caching=*/true);
  EXPECT_EQ(pool.free_queue_order(), (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
  std::vector<int32_t> a, b;
  ASSERT_TRUE(pool.allocate(3, &a));  // 0 1 2
  ASSERT_TRUE(pool.allocate(2, &b));  // 3 4
  const auto hashes = hash_full_blocks(std::vector<int32_t>(12, 7), 4);
  for (int i = 0; i < 3; ++i) pool.cache(a[i], hashes[i]);
  // A finished request's blocks return to the tail last-block-first.
  pool.free({a[2], a[1], a[0]});
  EXPECT_EQ(pool.free_queue_order(), (std::vector<int32_t>{5, 2, 1, 0}));
  EXPECT_EQ(pool.lookup(hashes[0]), 0);
  // Allocation pops the head and evicts its hash: block 5, then 2 (a's last).
  std::vector<int32_t> c;
  ASSERT_TRUE(pool.allocate(2, &c));
  EXPECT_EQ(c, (std::vector<int32_t>{5, 2}));
  EXPECT_FALSE(pool.lookup(hashes[2]));
  EXPECT_EQ(pool.lookup(hashes[1]), 1);
  // A hit is taken out of the free queue while used.
  pool.touch({0, 1});
  EXPECT_EQ(pool.ref_count(0), 1);
  EXPECT_EQ(pool.free_queue_order(), std::vector<int32_t>{});
  EXPECT_FALSE(pool.allocate(1, &c));
  pool.check_invariants();
  pool.free({1, 0});
  pool.free(b);
  pool.free(c);
  EXPECT_EQ(pool.num_free(), 6);
  EXPECT_THROW(pool.free({0}), InternalError);  // double free
  pool.check_invariants();
}

TEST(BlockPool, CachingOffNeverHits) {
  BlockPool pool(2, /*enable_caching=*/false);
  std::vector<int32_t> a;
  ASSERT_TRUE(pool.allocate(1, &a));
  const BlockHash h = hash_block({}, std::vector<int32_t>{1, 2});
  pool.cache(a[0], h);
  EXPECT_FALSE(pool.lookup(h));
}

TEST(BlockPool, RandomizedSharingKeepsInvariants) {
  std::mt19937 rng(11);
  BlockPool pool(32, true);
  std::vector<std::vector<int32_t>> owners(8);
  std::vector<BlockHash> known;
  for (int step = 0; step < 20000; ++step) {
    auto& mine = owners[rng() % owners.size()];
    switch (rng() % 4) {
      case 0: {  // allocate and maybe cache
        std::vector<int32_t> got;
        if (pool.allocate(1 + rng() % 3, &got)) {
          for (int32_t b : got) {
            if (rng() % 2) {
              known.push_back(
                  hash_block({}, std::vector<int32_t>{static_cast<int32_t>(rng() % 50)}));
              pool.cache(b, known.back());
            }
          }
          mine.insert(mine.end(), got.begin(), got.end());
        }
        break;
      }
      case 1: {  // share a cached block (prefix hit)
        if (known.empty()) break;
        if (const auto hit = pool.lookup(known[rng() % known.size()])) {
          pool.touch({*hit});
          mine.push_back(*hit);
        }
        break;
      }
      default:  // release everything this owner holds, last first
        pool.free(std::vector<int32_t>(mine.rbegin(), mine.rend()));
        mine.clear();
    }
    if (step % 97 == 0) pool.check_invariants();
  }
  for (auto& mine : owners) pool.free(std::vector<int32_t>(mine.rbegin(), mine.rend()));
  pool.check_invariants();
  EXPECT_EQ(pool.num_free(), 32);
  for (int32_t b = 0; b < 32; ++b) EXPECT_EQ(pool.ref_count(b), 0);
}

}  // namespace
}  // namespace pagoda
