// Typed KV-cache specs and the pool plan: groups keyed on the whole spec,
// pools keyed on page bytes (the byte figures of spec §5.4 for DeepSeek's
// cache kinds), ratio-aware slot math, and a randomized stress test of the
// manager over several pools that must leak no page.
#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <random>

#include "core/error.h"
#include "kv/kv_cache_manager.h"
#include "kv/kv_cache_plan.h"

namespace pagoda {
namespace {

KVCacheSpec spec(int64_t entry_bytes, int64_t window = 0, int32_t ratio = 1,
                 int64_t alignment = 1, std::string format = "test") {
  return {.sliding_window = window,
          .compress_ratio = ratio,
          .entry_bytes = entry_bytes,
          .page_alignment = alignment,
          .format = std::move(format)};
}

TEST(KVCachePlan, KAndVOfALayerShareAGroupAndLayersWithOneSpecShareIt) {
  // A Gemma-like hybrid: layers 0, 2 full; 1, 3 with a window of 8.
  std::vector<LayerKVCache> caches;
  for (int32_t l = 0; l < 4; ++l) {
    const KVCacheSpec s = spec(64, l % 2 ? 8 : 0);
    caches.push_back({l, "k", s});
    caches.push_back({l, "v", s});
  }
  const KVCachePlan plan = plan_kv_cache(caches, 16);
  ASSERT_EQ(plan.groups.size(), 2u);
  EXPECT_EQ(plan.groups[0].tensors, (std::vector<KVTensorRef>{{0, 0}, {0, 1}, {2, 0}, {2, 1}}));
  EXPECT_EQ(plan.groups[1].tensors, (std::vector<KVTensorRef>{{1, 0}, {1, 1}, {3, 0}, {3, 1}}));
  ASSERT_EQ(plan.pools.size(), 1u);  // equal pages: one pool of block ids
  EXPECT_EQ(plan.pools[0].page_bytes, 16 * 64);
  EXPECT_EQ(plan.pools[0].num_slots, 4);
  EXPECT_EQ(plan.bytes_per_block(), 4 * 16 * 64);
  EXPECT_EQ(plan.layer_cache_group[3], (std::vector<int32_t>{1, 1}));
  // A sequence of 100 positions holds 7 full blocks and at most 8/16 + 2 window blocks.
  EXPECT_EQ(plan.blocks_per_sequence(100), (std::vector<int64_t>{7 + 2}));
}

TEST(KVCachePlan, GroupsAreKeyedOnTheWholeSpecNotTheWindow) {
  // Same window (full), different kinds: they must not share block tables.
  const std::vector<LayerKVCache> caches = {
      {0, "latent", spec(1152, 0, 1, 1, "mla 512+64 bf16")},
      {0, "indexer_k", spec(256, 0, 1, 1, "indexer 128 bf16")},
      {1, "latent", spec(1152, 0, 1, 1, "mla 512+64 bf16")},
      {1, "compressed", spec(1152, 0, 4, 1, "mla 512+64 bf16")},
  };
  const KVCachePlan plan = plan_kv_cache(caches, 64);
  ASSERT_EQ(plan.groups.size(), 3u);
  EXPECT_EQ(plan.groups[0].tensors.size(), 2u);
  EXPECT_EQ(plan.layer_cache_group[1], (std::vector<int32_t>{0, 2}));
}

TEST(KVCachePlan, PoolsAreKeyedOnPageBytes) {
  // DeepSeek V3.2 in vLLM's fp8 formats, 64-token pages (spec §5.4):
  // MLA 64 x 656 = 41,984 B, indexer keys 64 x 132 = 8,448 B.
  std::vector<LayerKVCache> caches;
  for (int32_t l = 0; l < 3; ++l) {
    caches.push_back({l, "latent", spec(656, 0, 1, 1, "fp8_ds_mla")});
    caches.push_back({l, "indexer_k", spec(132, 0, 1, 1, "indexer fp8")});
  }
  const KVCachePlan v32 = plan_kv_cache(caches, 64);
  ASSERT_EQ(v32.pools.size(), 2u);
  EXPECT_EQ(v32.pools[0].page_bytes, 41984);
  EXPECT_EQ(v32.pools[1].page_bytes, 8448);
  EXPECT_EQ(v32.bytes_per_block(), 3 * (41984 + 8448));

  // DeepSeek V4's compressed kinds with 256-position blocks and 576-byte
  // alignment (spec §5.4): c4a main 64 x 584 -> 37,440; c4 indexer
  // 64 x 132 -> 8,640; c128a main 2 x 584 -> 1,728.
  const std::vector<LayerKVCache> v4 = {
      {0, "compressed", spec(584, 0, 4, 576, "v4 main fp8")},
      {0, "indexer_k", spec(132, 0, 4, 576, "indexer fp8")},
      {1, "compressed", spec(584, 0, 128, 576, "v4 main fp8")},
  };
  const KVCachePlan plan = plan_kv_cache(v4, 256);
  ASSERT_EQ(plan.pools.size(), 3u);
  EXPECT_EQ(plan.pools[0].page_bytes, 37440);
  EXPECT_EQ(plan.pools[1].page_bytes, 8640);
  EXPECT_EQ(plan.pools[2].page_bytes, 1728);
  EXPECT_EQ(plan.groups[2].spec.entries_per_block(256), 2);
}

TEST(KVCachePlan, RefusesABlockSizeTheRatioDoesNotDivide) {
  EXPECT_THROW(plan_kv_cache({{0, "compressed", spec(8, 0, 4)}}, 6), InputError);
  EXPECT_THROW(plan_kv_cache({}, 16), InputError);
  EXPECT_THROW(plan_kv_cache({{0, "k", spec(8)}}, 0), InputError);
}

TEST(KVCacheSpec, SlotsOfACompressedCacheAreWrittenOncePerRatio) {
  const KVCacheSpec c4 = spec(8, 0, 4);
  const std::vector<int32_t> table = {7, 3};  // block size 16: 4 entries a block
  for (int64_t pos = 0; pos < 32; ++pos) {
    const int64_t want = (pos + 1) % 4 ? -1 : table[pos / 16] * 4 + (pos % 16) / 4;
    EXPECT_EQ(c4.slot_of_position(table, pos, 16), want) << pos;
  }
  const KVCacheSpec dense = spec(8);
  EXPECT_EQ(dense.slot_of_position(table, 17, 16), 3 * 16 + 1);
  EXPECT_EQ(spec(8, 8).first_needed_position(20), 13);
  EXPECT_EQ(spec(8, 8).first_needed_position(3), 0);
}

// Requests of random lengths come and go (with prefix hits and sliding
// releases) over a plan with three pools; every pool's invariants hold
// after each operation, a failed allocation takes nothing, and at the end
// every page of every pool is free.
TEST(KVCacheManager, RandomizedStressOverSeveralPoolsLeaksNoPage) {
  constexpr int32_t kBlock = 8;
  std::vector<LayerKVCache> caches;
  for (int32_t l = 0; l < 4; ++l) {
    caches.push_back({l, "latent", spec(100)});                       // pool 0
    caches.push_back({l, "indexer_k", spec(20)});                     // pool 1
    if (l % 2) caches.push_back({l, "window", spec(100, 12)});        // pool 0, own group
    if (l == 3) caches.push_back({l, "compressed", spec(40, 0, 4)});  // pool 2
  }
  const KVCachePlan plan = plan_kv_cache(caches, kBlock);
  ASSERT_EQ(plan.pools.size(), 3u);
  // Pool 0 holds 4 latent tensors and 2 window tensors: split to groups of 2.
  ASSERT_EQ(plan.groups.size(), 5u);
  EXPECT_EQ(plan.pools[0].num_slots, 2);
  KVCacheManager kv(plan, 40, /*enable_prefix_caching=*/true);
  std::mt19937 rng(7);
  struct Live {
    KVRequestState state;
    std::vector<int32_t> tokens;
    int64_t computed = 0;
  };
  std::map<int, Live> live;
  const std::vector<int32_t> shared_prefix = {5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18};
  for (int step = 0, next_id = 0; step < 3000; ++step) {
    const int op = static_cast<int>(rng() % 3);
    if (op == 0 && live.size() < 6) {  // admit
      Live r;
      r.tokens = rng() % 2 ? shared_prefix : std::vector<int32_t>{};
      const int extra = 1 + static_cast<int>(rng() % 40);
      for (int i = 0; i < extra; ++i) r.tokens.push_back(static_cast<int32_t>(rng() % 50));
      r.computed = kv.take_cached_prefix(r.state, r.tokens);
      ASSERT_LT(r.computed, static_cast<int64_t>(r.tokens.size()));
      live.emplace(next_id++, std::move(r));
    } else if (op == 1 && !live.empty()) {  // compute a chunk
      auto it = live.begin();
      std::advance(it, rng() % live.size());
      Live& r = it->second;
      const int64_t total = static_cast<int64_t>(r.tokens.size());
      const int64_t next = std::min<int64_t>(total, r.computed + 1 + rng() % 12);
      const int32_t free_before = kv.num_free_blocks();
      if (kv.allocate(r.state, r.computed, next)) {
        r.computed = next;
        kv.cache_full_blocks(r.state, r.tokens, r.computed);
        if (r.computed == total) r.tokens.push_back(static_cast<int32_t>(rng() % 50));
      } else {
        // Refused: the sliding releases may have returned blocks, nothing was taken.
        EXPECT_GE(kv.num_free_blocks(), free_before);
      }
    } else if (!live.empty()) {  // finish or preempt
      auto it = live.begin();
      std::advance(it, rng() % live.size());
      kv.free(it->second.state);
      live.erase(it);
    }
    ASSERT_NO_THROW(kv.check_invariants()) << "step " << step;
  }
  for (auto& [id, r] : live) kv.free(r.state);
  for (const BlockPool& p : kv.pools()) {
    EXPECT_EQ(p.num_free(), 40);
    for (int32_t b = 0; b < p.num_blocks(); ++b) EXPECT_EQ(p.ref_count(b), 0);
  }
}

}  // namespace
}  // namespace pagoda

namespace pagoda {
namespace {

// The model runner keeps a copy of each running request's block tables and
// appends to it; it tells a new admission (a re-admitted request, or a new
// one at a freed one's address) from the one it copied by the generation,
// which must change on every admission, with or without a prefix lookup.
TEST(KVCacheManager, EveryAdmissionGetsANewGeneration) {
  KVCacheManager kv(plan_kv_cache({{0, "latent", spec(100)}}, 4), 8, true);
  KVRequestState state;
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6};
  kv.take_cached_prefix(state, tokens);
  ASSERT_TRUE(kv.allocate(state, 0, 6));
  const uint64_t first = state.generation;
  ASSERT_TRUE(kv.allocate(state, 6, 9));  // growing a running request keeps it
  EXPECT_EQ(state.generation, first);
  kv.free(state);
  // Admitted again without a prefix lookup (a request scoring its prompt).
  ASSERT_TRUE(kv.allocate(state, 0, 6));
  const uint64_t second = state.generation;
  EXPECT_NE(second, first);
  kv.free(state);
  kv.take_cached_prefix(state, tokens);
  EXPECT_NE(state.generation, second);
  kv.free(state);
}

}  // namespace
}  // namespace pagoda
