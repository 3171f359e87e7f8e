#include <gtest/gtest.h>

#include <random>
#include <set>

#include "core/error.h"
#include "kv/block_allocator.h"

namespace pagoda {
namespace {

TEST(BlockAllocator, AllocatesDistinctBlocksAndRefusesOverdraw) {
  BlockAllocator pool(8);
  std::vector<int32_t> a, b;
  ASSERT_TRUE(pool.allocate(5, &a));
  EXPECT_FALSE(pool.allocate(4, &b));  // all-or-nothing
  EXPECT_TRUE(b.empty());
  ASSERT_TRUE(pool.allocate(3, &b));
  std::set<int32_t> ids(a.begin(), a.end());
  ids.insert(b.begin(), b.end());
  EXPECT_EQ(ids.size(), 8u);
  EXPECT_EQ(pool.num_free(), 0);
  pool.free(a);
  EXPECT_EQ(pool.num_free(), 5);
  EXPECT_THROW(pool.free({a[0]}), InternalError);  // double free is caught
}

TEST(BlockAllocator, RandomizedNoLeakNoDoubleOwner) {
  std::mt19937 rng(7);
  BlockAllocator pool(64);
  std::vector<std::vector<int32_t>> owners(10);
  std::vector<int> owner_of(64, -1);
  for (int step = 0; step < 5000; ++step) {
    const int o = static_cast<int>(rng() % owners.size());
    if (rng() % 2) {
      std::vector<int32_t> got;
      const int n = static_cast<int>(rng() % 6);
      if (pool.allocate(n, &got)) {
        for (int32_t b : got) {
          ASSERT_EQ(owner_of[b], -1);
          owner_of[b] = o;
        }
        owners[o].insert(owners[o].end(), got.begin(), got.end());
      }
    } else {
      for (int32_t b : owners[o]) owner_of[b] = -1;
      pool.free(owners[o]);
      owners[o].clear();
    }
    int held = 0;
    for (const auto& v : owners) held += static_cast<int>(v.size());
    ASSERT_EQ(held + pool.num_free(), 64);
  }
}

}  // namespace
}  // namespace pagoda
