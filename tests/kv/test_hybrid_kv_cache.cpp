// The hybrid KV cache (DeepSeek V4, spec §5.4 and the seed): groups with
// their own page granularity (positions per page), page-size buckets, one
// tensor count per pool, pools sized by what a sequence needs from each,
// prefix hits that need sub-pages of a sliding state cache, and a
// randomized stress test over V4-like specs that must leak no page.
#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <random>
#include <set>

#include "core/error.h"
#include "kv/kv_cache_manager.h"
#include "kv/kv_cache_plan.h"
#include "models/config.h"
#include "models/deepseek_v4_config.h"

namespace pagoda {
namespace {

KVCacheSpec spec(int64_t entry_bytes, int64_t window = 0, int32_t ratio = 1,
                 int32_t block_size = 0, int64_t alignment = 1, std::string format = "test") {
  return {.sliding_window = window,
          .compress_ratio = ratio,
          .entry_bytes = entry_bytes,
          .block_size = block_size,
          .page_alignment = alignment,
          .format = std::move(format)};
}

std::vector<int32_t> tokens(int n, int32_t first = 100) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

TEST(HybridKVCache, GroupBlockSizesResolveAndAreChecked) {
  const KVCachePlan plan = plan_kv_cache({{0, "full", spec(10)},
                                          {0, "window", spec(20, 8, 1, 4)},
                                          {0, "compressed", spec(40, 0, 4)}},
                                         16);
  ASSERT_EQ(plan.groups.size(), 3u);
  EXPECT_EQ(plan.groups[0].block_size, 16);  // 0: the engine's
  EXPECT_EQ(plan.groups[1].block_size, 4);
  EXPECT_EQ(plan.groups[2].block_size, 16);
  EXPECT_EQ(plan.groups[1].pages_per_block(16), 4);
  EXPECT_EQ(plan.pools[plan.groups[1].pool].page_bytes, 4 * 20);
  EXPECT_EQ(plan.pools[plan.groups[2].pool].page_bytes, 4 * 40);  // 16 / 4 entries
  // A window of 8 in 4-position pages: 8 / 4 + 2 pages; full: every page.
  EXPECT_EQ(plan.group_blocks(1, 100), 4);
  EXPECT_EQ(plan.group_blocks(0, 100), 7);
  EXPECT_EQ(plan.group_blocks(2, 100), 7);
  // The engine block must be a multiple of every group's pages, and a
  // group's pages a multiple of its compress ratio.
  EXPECT_THROW(plan_kv_cache({{0, "window", spec(20, 8, 1, 4)}}, 6), InputError);
  EXPECT_THROW(plan_kv_cache({{0, "state", spec(20, 8, 4, 6)}}, 12), InputError);
  EXPECT_NO_THROW(plan_kv_cache({{0, "state", spec(20, 8, 4, 8)}}, 16));
}

TEST(HybridKVCache, SlotsAreAtTheGroupsPageGranularity) {
  // 4-position pages: position p is page p / 4, entry p % 4 of it.
  const KVCacheSpec window = spec(20, 8, 1, 4);
  const std::vector<int32_t> table = {-1, -1, 9, 5, 2};
  for (int64_t pos = 8; pos < 20; ++pos) {
    EXPECT_EQ(window.slot_of_position(table, pos, 4), table[pos / 4] * 4 + pos % 4) << pos;
  }
  // A compressed cache in 16-position pages of 4 entries.
  const KVCacheSpec c4 = spec(40, 0, 4);
  EXPECT_EQ(c4.slot_of_position({3, 7}, 19, 16), 7 * 4 + 0);
  EXPECT_EQ(c4.slot_of_position({3, 7}, 18, 16), -1);
}

TEST(HybridKVCache, BucketsJoinTheSmallestLargerBucketWithinAQuarter) {
  // 850 pads to 1000 (1.18x); 700 would pad to 1000 at 1.43x: a new bucket,
  // which 600 joins (1.17x); 100 stays alone.
  const KVCachePlan plan = plan_kv_cache({{0, "a", spec(1000)},
                                          {0, "b", spec(850)},
                                          {0, "c", spec(700)},
                                          {0, "d", spec(600)},
                                          {0, "e", spec(100)}},
                                         1);
  ASSERT_EQ(plan.pools.size(), 3u);
  EXPECT_EQ(plan.pools[0].page_bytes, 1000);
  EXPECT_EQ(plan.pools[1].page_bytes, 700);
  EXPECT_EQ(plan.pools[2].page_bytes, 100);
  const std::vector<int32_t> want_pool = {0, 0, 1, 1, 2};
  for (size_t g = 0; g < 5; ++g) EXPECT_EQ(plan.groups[g].pool, want_pool[g]) << g;
  // Exactly 1.25x still joins; just over does not.
  EXPECT_EQ(plan_kv_cache({{0, "a", spec(1250)}, {0, "b", spec(1000)}}, 1).pools.size(), 1u);
  EXPECT_EQ(plan_kv_cache({{0, "a", spec(1251)}, {0, "b", spec(1000)}}, 1).pools.size(), 2u);
}

TEST(HybridKVCache, GroupsOfAPoolShareOneTensorCount) {
  // 61 window + 30 + 30 + 31 tensors of one page size (V4-Pro's large
  // bucket: window 128, full c4, states of 8 positions): groups of 30 leave
  // empty only 29 slots of the window's third group and 29 of the state's
  // second, a few pages each; 31 or 32 would leave a slot or two of every
  // page of the full c4 cache empty, one group per kind (61) half of them.
  std::vector<LayerKVCache> caches;
  for (int32_t l = 0; l < 61; ++l) {
    caches.push_back({l, "window", spec(64, 128)});
    if (l % 2 == 0 && l < 60) {
      caches.push_back({l, "c4", spec(256, 0, 4)});
      caches.push_back({l, "c4 state", spec(64, 8, 1, 0, 1, "c4 state")});
    }
    if (l % 2 == 1 || l == 60) caches.push_back({l, "state", spec(64, 8)});
  }
  const KVCachePlan plan = plan_kv_cache(caches, 16);
  ASSERT_EQ(plan.pools.size(), 1u);
  EXPECT_EQ(plan.pools[0].num_slots, 30);
  std::map<std::string, std::vector<size_t>> sizes;
  for (const KVCacheGroup& g : plan.groups) {
    EXPECT_LE(g.tensors.size(), 30u);
    sizes[g.spec.format == "c4 state"      ? "c4 state"
          : g.spec.sliding_window == 128   ? "window"
          : g.spec.compress_ratio == 4     ? "c4"
                                           : "state"]
        .push_back(g.tensors.size());
  }
  EXPECT_EQ(sizes["window"], (std::vector<size_t>{30, 30, 1}));
  EXPECT_EQ(sizes["c4"], (std::vector<size_t>{30}));
  EXPECT_EQ(sizes["c4 state"], (std::vector<size_t>{30}));
  EXPECT_EQ(sizes["state"], (std::vector<size_t>{30, 1}));
  // Many kinds of unequal counts whose best split still wastes over 5%:
  // one tensor per group.
  const KVCachePlan odd = plan_kv_cache({{0, "a", spec(8, 0, 1, 0, 1, "a")},
                                         {1, "a", spec(8, 0, 1, 0, 1, "a")},
                                         {0, "b", spec(8, 0, 1, 0, 1, "b")},
                                         {1, "b", spec(8, 0, 1, 0, 1, "b")},
                                         {2, "b", spec(8, 0, 1, 0, 1, "b")}},
                                        4);
  EXPECT_EQ(odd.pools[0].num_slots, 1);
  EXPECT_EQ(odd.groups.size(), 5u);
  // Every cache still maps to the group holding it.
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    for (const KVTensorRef& t : plan.groups[g].tensors) {
      EXPECT_EQ(plan.layer_cache_group[t.layer][t.cache], static_cast<int32_t>(g));
    }
  }
  // Equal counts (a dense model's K and V) stay one group; 4 and 2 split to 2s.
  EXPECT_EQ(plan_kv_cache({{0, "k", spec(8)}, {0, "v", spec(8)}, {1, "k", spec(8)}}, 4)
                .groups.size(),
            1u);
  const KVCachePlan two = plan_kv_cache({{0, "a", spec(8)}, {1, "a", spec(8)}, {2, "a", spec(8)},
                                         {3, "a", spec(8)}, {0, "b", spec(8, 4)},
                                         {1, "b", spec(8, 4)}},
                                        4);
  EXPECT_EQ(two.pools[0].num_slots, 2);
  EXPECT_EQ(two.groups.size(), 3u);
}

// The real V4-Pro config (fixture: spec §1.2) through the lead's specs: the
// pools are the page-size buckets of spec §5.4's table.
std::vector<LayerKVCache> v4_caches(const std::string& name, DType dtype, bool fp4) {
  const std::string dir = std::string(PAGODA_TEST_DATA_DIR) + "/configs/" + name;
  const ModelConfig config = load_model_config(dir);
  return deepseek_v4_kv_cache_specs(config, load_deepseek_v4_config(dir, config), dtype,
                                    fp4 ? DType::F4E2M1 : dtype);
}

// Page bytes of each (layer kind, cache name) kind's pool, and the
// kind's own (unpadded, 576-aligned) page.
std::map<std::string, std::pair<int64_t, int64_t>> buckets_by_kind(
    const std::vector<LayerKVCache>& caches, const KVCachePlan& plan) {
  std::map<int32_t, int32_t> ratio_of_layer;
  for (const LayerKVCache& c : caches) {
    if (c.name == "compressed") ratio_of_layer[c.layer] = c.spec.compress_ratio;
  }
  std::map<std::string, std::pair<int64_t, int64_t>> out;
  std::vector<int32_t> seen(plan.layer_cache_group.size(), 0);
  for (const LayerKVCache& c : caches) {
    const KVCacheGroup& g = plan.groups[plan.layer_cache_group[c.layer][seen[c.layer]++]];
    const int32_t r = ratio_of_layer.count(c.layer) ? ratio_of_layer[c.layer] : 0;
    const std::string kind = (c.name == "swa" ? "" : "c" + std::to_string(r) + " ") + c.name;
    const std::pair<int64_t, int64_t> v = {plan.pools[g.pool].page_bytes,
                                           c.spec.page_bytes(g.block_size)};
    const auto [it, fresh] = out.emplace(kind, v);
    EXPECT_EQ(it->second, v) << kind << ": one kind in two buckets";
  }
  return out;
}

TEST(HybridKVCache, DeepseekV4ProFp8HasTheThreeBucketsOfSpec54) {
  const auto caches = v4_caches("deepseek-v4-pro", DType::F8E4M3, false);
  const KVCachePlan plan = plan_kv_cache(caches, 256);
  ASSERT_EQ(plan.pools.size(), 3u);
  std::set<int64_t> pages;
  for (const KVPoolPlan& p : plan.pools) pages.insert(p.page_bytes);
  EXPECT_EQ(pages, (std::set<int64_t>{37440, 8640, 1728}));
  // Spec §5.4: kind -> (bucket, its own 576-aligned page).
  const std::map<std::string, std::pair<int64_t, int64_t>> want = {
      {"swa", {37440, 37440}},
      {"c4 compressed", {37440, 37440}},
      {"c4 compressor_state", {37440, 32832}},
      {"c128 compressor_state", {37440, 32832}},
      {"c4 indexer_k", {8640, 8640}},
      {"c4 indexer_state", {8640, 8640}},
      {"c128 compressed", {1728, 1728}},
  };
  EXPECT_EQ(buckets_by_kind(caches, plan), want);
  // Groups of one tensor count per pool: 30 in the large and middle
  // buckets, 31 (the c128a layers) in the small one; at 1M positions the
  // slots a sequence's block ids reserve exceed its pages by under 1%.
  for (const KVCacheGroup& g : plan.groups) {
    EXPECT_LE(static_cast<int32_t>(g.tensors.size()), plan.pools[g.pool].num_slots);
  }
  std::map<int64_t, int32_t> slots_of_page;
  for (const KVPoolPlan& p : plan.pools) slots_of_page[p.page_bytes] = p.num_slots;
  EXPECT_EQ(slots_of_page, (std::map<int64_t, int32_t>{{37440, 30}, {8640, 30}, {1728, 31}}));
  const int64_t held = plan.bytes_per_sequence(1 << 20);
  const int64_t reserved = plan.reserved_bytes_per_sequence(1 << 20);
  EXPECT_GE(reserved, held);
  EXPECT_LT(reserved - held, held / 100);
}

TEST(HybridKVCache, DeepseekV4ProBf16AndFp4IndexerBuckets) {
  // bf16: every kind of a bucket aligns to the same page, no padding.
  const auto bf16 = v4_caches("deepseek-v4-pro", DType::BF16, false);
  const KVCachePlan plan = plan_kv_cache(bf16, 256);
  const std::map<std::string, std::pair<int64_t, int64_t>> want = {
      {"swa", {65664, 65664}},
      {"c4 compressed", {65664, 65664}},
      {"c4 compressor_state", {65664, 65664}},
      {"c128 compressor_state", {65664, 65664}},
      {"c4 indexer_k", {16704, 16704}},
      {"c4 indexer_state", {16704, 16704}},
      {"c128 compressed", {2304, 2304}},
  };
  EXPECT_EQ(buckets_by_kind(bf16, plan), want);
  // fp8 entries with MXFP4 indexer keys: 64 x 68 = 4,352 -> 4,608, and
  // the indexer state shrinks to 2 positions (4,096 -> 4,608).
  const auto fp4 = v4_caches("deepseek-v4-pro", DType::F8E4M3, true);
  const auto kinds = buckets_by_kind(fp4, plan_kv_cache(fp4, 256));
  EXPECT_EQ(kinds.at("c4 indexer_k"), (std::pair<int64_t, int64_t>{4608, 4608}));
  EXPECT_EQ(kinds.at("c4 indexer_state"), (std::pair<int64_t, int64_t>{4608, 4608}));
}

TEST(HybridKVCache, PoolsAreSizedByWhatASequenceNeedsFromEach) {
  // Full pages of 16 positions (400 B) and a window of 8 in 4-position
  // pages (40 B, another pool): a 64-position sequence needs 4 full pages
  // and 8 / 4 + 2 window pages: 4 x 400 + 4 x 40 = 1,760 B.
  const KVCachePlan plan =
      plan_kv_cache({{0, "full", spec(25)}, {0, "window", spec(10, 8, 1, 4)}}, 16);
  ASSERT_EQ(plan.pools.size(), 2u);
  EXPECT_EQ(plan.blocks_per_sequence(64), (std::vector<int64_t>{4, 4}));
  EXPECT_EQ(plan.reserved_bytes_per_sequence(64), 1760);
  const int64_t per_seq = plan.reserved_bytes_per_sequence(64);
  const KVPoolSizes sizes = size_kv_pools(plan, 10 * per_seq + 1, 64);
  EXPECT_EQ(sizes.num_blocks, (std::vector<int64_t>{40, 40}));
  EXPECT_EQ(sizes.token_capacity, 10 * 64);
  // A dense model: one pool, budget / bytes_per_block blocks, capacity
  // blocks x block size.
  const KVCachePlan dense = plan_kv_cache({{0, "k", spec(8)}, {0, "v", spec(8)}}, 16);
  const KVPoolSizes d = size_kv_pools(dense, 1000 * dense.bytes_per_block() + 5, 64);
  EXPECT_EQ(d.num_blocks, (std::vector<int64_t>{1000}));
  EXPECT_EQ(d.token_capacity, 1000 * 16);
}

// Runs a request over `prompt` in chunks of `chunk` positions, as the
// scheduler does (release, allocate, compute, cache); checks after each
// step that a sliding group of small pages holds only its window's pages.
void run(KVCacheManager& kv, KVRequestState& state, const std::vector<int32_t>& prompt,
         int64_t chunk) {
  int64_t computed = kv.take_cached_prefix(state, prompt);
  while (computed < static_cast<int64_t>(prompt.size())) {
    const int64_t next = std::min<int64_t>(computed + chunk, prompt.size());
    ASSERT_TRUE(kv.allocate(state, computed, next));
    computed = next;
    kv.cache_full_blocks(state, prompt, computed);
  }
}

int64_t held(const std::vector<int32_t>& table) {
  return std::count_if(table.begin(), table.end(), [](int32_t b) { return b >= 0; });
}

TEST(HybridKVCache, StatePagesGoLongBeforeTheirBlockIsHashedAndAHitAtItsEndFindsTheLast) {
  // Engine blocks of 256; a full compressed cache (r = 4), a window of 128
  // in 64-position pages and a compressor state of 8 positions in
  // 4-position pages, each in its own pool.
  const KVCachePlan plan = plan_kv_cache({{0, "compressed", spec(100, 0, 4)},
                                          {0, "swa", spec(10, 128, 1, 64)},
                                          {0, "state", spec(1000, 8, 1, 4)}},
                                         256);
  ASSERT_EQ(plan.pools.size(), 3u);
  KVCacheManager kv(plan, 400, true);
  const auto prompt = tokens(700);
  KVRequestState a;
  // Decode-like: one position a step; the state group never holds more
  // than the pages of the last 8 positions plus the one being filled.
  int64_t computed = kv.take_cached_prefix(a, prompt);
  ASSERT_EQ(computed, 0);
  for (; computed < 700; ++computed) {
    ASSERT_TRUE(kv.allocate(a, computed, computed + 1));
    EXPECT_LE(held(a.block_tables[2]), 3) << computed;
    EXPECT_LE(held(a.block_tables[1]), 3) << computed;
    kv.cache_full_blocks(a, prompt, computed + 1);
  }
  std::vector<int32_t> last_pages;  // the state pages still held, in table order
  for (int32_t b : a.block_tables[2]) {
    if (b >= 0) last_pages.push_back(b);
  }
  ASSERT_GE(last_pages.size(), 2u);
  kv.free(a);
  kv.check_invariants();
  // LRU at the group's granularity: the state pool's queue ends with the
  // request's pages, last page first (evicted before the earlier ones).
  const std::vector<int32_t> order = kv.pools()[2].free_queue_order();
  const std::vector<int32_t> tail(order.end() - static_cast<int64_t>(last_pages.size()),
                                  order.end());
  EXPECT_EQ(tail, std::vector<int32_t>(last_pages.rbegin(), last_pages.rend()));

  // Same 600 tokens, then others: the hit stops at 512 (block 2 differs)
  // and needs, of the state cache, pages 126 and 127 (positions 505..511,
  // the window of the query at 512), released by nobody since they were
  // the last when block 1 was hashed.
  std::vector<int32_t> other(prompt.begin(), prompt.begin() + 600);
  for (int i = 0; i < 50; ++i) other.push_back(7);
  KVRequestState b;
  EXPECT_EQ(kv.take_cached_prefix(b, other), 512);
  ASSERT_EQ(b.block_tables[2].size(), 128u);
  for (int64_t p = 0; p < 128; ++p) EXPECT_EQ(b.block_tables[2][p] >= 0, p >= 126) << p;
  ASSERT_EQ(b.block_tables[1].size(), 8u);  // window 128: positions 385..511, pages 6, 7
  for (int64_t p = 0; p < 8; ++p) EXPECT_EQ(b.block_tables[1][p] >= 0, p >= 6) << p;
  EXPECT_EQ(held(b.block_tables[0]), 2);  // the full cache: both blocks
  kv.free(b);

  // A prompt that differs inside block 1 hits block 0 only, with the
  // state pages of positions 249..255.
  std::vector<int32_t> early(prompt.begin(), prompt.begin() + 300);
  early[260] = 1;
  KVRequestState c;
  EXPECT_EQ(kv.take_cached_prefix(c, early), 256);
  EXPECT_EQ(held(c.block_tables[2]), 2);
  EXPECT_GE(c.block_tables[2][62], 0);
  EXPECT_GE(c.block_tables[2][63], 0);
  kv.free(c);
  kv.check_invariants();
}

TEST(HybridKVCache, AHitNeedsEverySubPageTheQueryReads) {
  // A state page evicted from the pool loses its key: the hit must fall
  // back to a boundary whose pages are all still there.
  const KVCachePlan plan = plan_kv_cache(
      {{0, "full", spec(100)}, {0, "state", spec(1000, 8, 1, 4)}}, 16);
  ASSERT_EQ(plan.pools.size(), 2u);
  // The state pool holds 6 pages: 3 for the request, then an eviction.
  KVCacheManager kv(plan, std::vector<int32_t>{100, 6}, true);
  const auto prompt = tokens(50);
  KVRequestState a;
  run(kv, a, prompt, 1);
  kv.free(a);
  KVRequestState b;
  EXPECT_EQ(kv.take_cached_prefix(b, prompt), 48);
  kv.free(b);
  // Allocating the whole state pool (a request of 24 positions from a
  // different prompt, 6 state pages) evicts every cached state page.
  KVRequestState filler;
  const auto other = tokens(24, 5000);
  EXPECT_EQ(kv.take_cached_prefix(filler, other), 0);
  ASSERT_TRUE(kv.allocate(filler, 0, 24));
  kv.free(filler);
  KVRequestState c;
  EXPECT_EQ(kv.take_cached_prefix(c, prompt), 0);
  kv.free(c);
  kv.check_invariants();
}

// Requests of random lengths over V4-like specs (window pages of 64
// positions with W = 128; state pages of 4 and 8 positions with windows 8
// and 128; compressed r = 4 and r = 16 / 128 in 256-position blocks; an
// indexer) come and go with prefix hits, chunked prefill, decode, sliding
// releases, preemption and finishing. After every operation: every pool's
// invariants hold, every page a live request holds is referenced (the
// references of each pool equal the pages the requests hold), and every
// page the request's next query reads is held. At the end every page of
// every pool is free.
TEST(HybridKVCache, RandomizedStressOverV4LikeSpecsLeaksNoPage) {
  constexpr int32_t kBlock = 256;
  std::vector<LayerKVCache> caches;
  for (int32_t l = 0; l < 4; ++l) {
    const int32_t r = l == 0 ? 16 : l % 2 ? 4 : 128;
    caches.push_back({l, "swa", spec(584, 128, 1, 64, 576)});
    caches.push_back({l, "compressed", spec(584, 0, r, 0, 576)});
    caches.push_back({l, "compressor_state", spec(r == 4 ? 8192 : 4096, r == 4 ? 8 : 128, 1,
                                                  r == 4 ? 4 : 8, 576)});
    if (r == 4) {
      caches.push_back({l, "indexer_k", spec(132, 0, 4, 0, 576)});
      caches.push_back({l, "indexer_state", spec(2048, 8, 1, 4, 576)});
    }
  }
  const KVCachePlan plan = plan_kv_cache(caches, kBlock);
  ASSERT_GE(plan.pools.size(), 3u);
  // Pools sized for about five sequences of 1500 positions.
  std::vector<int32_t> sizes;
  for (int64_t need : plan.blocks_per_sequence(1500)) {
    sizes.push_back(static_cast<int32_t>(5 * need));
  }
  KVCacheManager kv(plan, sizes, /*enable_prefix_caching=*/true);
  std::mt19937 rng(11);
  struct Live {
    KVRequestState state;
    std::vector<int32_t> tokens;
    int64_t computed = 0;
  };
  std::map<int, Live> live;
  std::vector<std::vector<int32_t>> prefixes(2);
  for (auto& p : prefixes) {
    const int n = 200 + static_cast<int>(rng() % 700);
    for (int i = 0; i < n; ++i) p.push_back(static_cast<int32_t>(rng() % 1000));
  }
  auto check = [&](int step) {
    ASSERT_NO_THROW(kv.check_invariants()) << "step " << step;
    std::vector<std::map<int32_t, int32_t>> refs(plan.pools.size());
    for (const auto& [id, r] : live) {
      for (size_t g = 0; g < plan.groups.size(); ++g) {
        if (r.state.block_tables.empty()) continue;
        const auto& table = r.state.block_tables[g];
        for (int32_t b : table) {
          if (b >= 0) refs[plan.groups[g].pool][b]++;
        }
        // The next query (at `computed`) reads from first_needed on.
        const int64_t b_g = plan.groups[g].block_size;
        const int64_t first = plan.groups[g].spec.first_needed_position(r.computed) / b_g;
        const int64_t end = (r.computed + b_g - 1) / b_g;
        ASSERT_GE(static_cast<int64_t>(table.size()), end) << "step " << step << " group " << g;
        for (int64_t p = first; p < end; ++p) {
          ASSERT_GE(table[p], 0) << "step " << step << " group " << g << " page " << p;
        }
      }
    }
    for (size_t p = 0; p < plan.pools.size(); ++p) {
      const BlockPool& pool = kv.pools()[p];
      for (int32_t b = 0; b < pool.num_blocks(); ++b) {
        const auto it = refs[p].find(b);
        ASSERT_EQ(pool.ref_count(b), it == refs[p].end() ? 0 : it->second)
            << "step " << step << " pool " << p << " block " << b;
      }
    }
  };
  int64_t hits = 0, refusals = 0;
  for (int step = 0, next_id = 0; step < 8000; ++step) {
    const int op = static_cast<int>(rng() % 8);  // admit 1/8, compute 6/8, finish 1/8
    if (op == 0 && live.size() < 7) {  // admit
      Live r;
      if (rng() % 3) r.tokens = prefixes[rng() % prefixes.size()];
      const int extra = 1 + static_cast<int>(rng() % 600);
      for (int i = 0; i < extra; ++i) r.tokens.push_back(static_cast<int32_t>(rng() % 1000));
      r.computed = kv.take_cached_prefix(r.state, r.tokens);
      ASSERT_LT(r.computed, static_cast<int64_t>(r.tokens.size()));
      ASSERT_EQ(r.computed % kBlock, 0);
      if (r.computed > 0) ++hits;
      live.emplace(next_id++, std::move(r));
    } else if (op != 7 && !live.empty()) {  // compute a chunk (prefill) or one token (decode)
      auto it = live.begin();
      std::advance(it, rng() % live.size());
      Live& r = it->second;
      const auto total = static_cast<int64_t>(r.tokens.size());
      const int64_t n = rng() % 2 ? 1 : 1 + static_cast<int64_t>(rng() % 400);
      const int64_t next = std::min<int64_t>(total, r.computed + n);
      std::vector<int32_t> free_before;
      for (const BlockPool& p : kv.pools()) free_before.push_back(p.num_free());
      if (kv.allocate(r.state, r.computed, next)) {
        r.computed = next;
        kv.cache_full_blocks(r.state, r.tokens, r.computed);
        if (r.computed == total) r.tokens.push_back(static_cast<int32_t>(rng() % 1000));
        if (r.computed >= 1500) {  // done: its length limit
          kv.free(r.state);
          live.erase(it);
        }
      } else {
        // Refused: sliding releases may have given pages back, nothing was taken.
        for (size_t p = 0; p < kv.pools().size(); ++p) {
          EXPECT_GE(kv.pools()[p].num_free(), free_before[p]);
        }
        // Preempt it (the scheduler's answer): everything goes back.
        ++refusals;
        kv.free(r.state);
        live.erase(it);
      }
    } else if (op == 7 && !live.empty()) {  // finish or preempt
      auto it = live.begin();
      std::advance(it, rng() % live.size());
      kv.free(it->second.state);
      live.erase(it);
    }
    check(step);
    if (::testing::Test::HasFatalFailure()) return;
  }
  EXPECT_GT(hits, 40);
  EXPECT_GT(refusals, 10);  // the pools ran short (preemption) often enough
  for (auto& [id, r] : live) kv.free(r.state);
  live.clear();
  check(-1);
  for (size_t p = 0; p < kv.pools().size(); ++p) {
    EXPECT_EQ(kv.pools()[p].num_free(), sizes[p]) << "pool " << p;
  }
}

}  // namespace
}  // namespace pagoda
