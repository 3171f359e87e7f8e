// The V3.2 lightning indexer on every supported ISA: indexer_topk against
// the scalar reference (every score materialised, stable sort) on
// integer-valued data, where f32 sums are exact in any order, so slots and
// positions must match entry for entry, ties included (lower position
// first); contexts far past topk (3000 keys with topk 64; 3000 with topk
// 2048 at the real widths), mixed prefill/decode batches, block sizes 16
// and 64, -1 padding; batch invariance (a token alone, 1 vs 2 threads with
// a token's keys split between threads); write_indexer_k's page formats
// byte for byte against an fp8 simulation written here; an fp8 cache's
// top-k == that of an f32 cache holding the dequantised keys.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "ops/ops.h"
#include "ops/reference.h"
#include "ops_test_util.h"

namespace pagoda::ops::testing {
namespace {

class Indexer : public IsaTest {};

using Seqs = std::vector<std::pair<int, int>>;  // {cached tokens, new tokens}

std::vector<float> small_ints(size_t n, int lo, int hi, std::mt19937& rng) {
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = float(d(rng));
  return v;
}

struct Step {
  IndexerLayout layout;
  int heads = 0, max_blocks = 0, num_blocks = 0;
  std::vector<char> cache;
  std::vector<float> keys, q, w;  // keys: every written key, in slot order of `slots`
  std::vector<int64_t> slots;
  std::vector<int32_t> tables, qsl = {0}, seq_lens;
  AttentionBatch batch() const {
    return {static_cast<int>(seq_lens.size()), qsl.data(), seq_lens.data(), tables.data(),
            max_blocks, 0};
  }
  int64_t tokens() const { return qsl.back(); }
};

// Keys, queries and weights small integers (exact f32 scores); the cache
// over shuffled block ids, 0xFF bytes (NaN in every format) elsewhere.
Step build(int heads, int dim, int bs, DType dt, const Seqs& seqs, std::mt19937& rng) {
  Step st;
  st.heads = heads;
  st.layout = IndexerLayout{bs, dim, dt};
  int total = 0;
  for (auto [c, n] : seqs) {
    const int b = (c + n + bs - 1) / bs;
    st.max_blocks = std::max(st.max_blocks, b);
    total += b;
  }
  st.num_blocks = total + 2;
  st.cache.assign(size_t(st.num_blocks) * st.layout.page_bytes(), char(0xFF));
  std::vector<int32_t> ids(st.num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  st.tables.assign(seqs.size() * st.max_blocks, -1);
  size_t next = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const int len = seqs[s].first + seqs[s].second;
    for (int b = 0; b < (len + bs - 1) / bs; ++b) st.tables[s * st.max_blocks + b] = ids[next++];
    for (int t = 0; t < len; ++t)
      st.slots.push_back(int64_t{st.tables[s * st.max_blocks + t / bs]} * bs + t % bs);
    const auto k = small_ints(size_t(len) * dim, -3, 3, rng);
    st.keys.insert(st.keys.end(), k.begin(), k.end());
    const auto q = small_ints(size_t(seqs[s].second) * heads * dim, -3, 3, rng);
    st.q.insert(st.q.end(), q.begin(), q.end());
    const auto w = small_ints(size_t(seqs[s].second) * heads, -2, 3, rng);
    st.w.insert(st.w.end(), w.begin(), w.end());
    st.qsl.push_back(st.qsl.back() + seqs[s].second);
    st.seq_lens.push_back(len);
  }
  write_indexer_k(st.keys.data(), st.slots.data(), int64_t(st.slots.size()), st.layout,
                  st.cache.data());
  return st;
}

struct TopK {
  std::vector<int32_t> slots, positions;
};

TopK run(const Step& st, int topk, bool reference = false) {
  TopK r;
  r.slots.assign(size_t(st.tokens()) * topk, -7);
  r.positions.assign(r.slots.size(), -7);
  (reference ? ref::indexer_topk : indexer_topk)(st.q.data(), st.w.data(), st.cache.data(),
                                                 st.layout, st.batch(), st.heads, topk,
                                                 r.slots.data(), r.positions.data(), IndexerOrder::Score);
  return r;
}

void expect_same(const TopK& a, const TopK& b, const std::string& what) {
  EXPECT_EQ(a.slots, b.slots) << what;
  EXPECT_EQ(a.positions, b.positions) << what;
}

TEST_P(Indexer, MatchesReferenceExactlyInOrder) {
  std::mt19937 rng(11);
  struct C {
    int heads, dim, bs, topk;
    Seqs seqs;
  };
  const std::vector<C> cases = {
      // Narrow widths, context far past topk, prefill from 0 (rows with
      // fewer keys than topk: -1 padding), chunked prefill, decodes.
      {4, 32, 16, 64, {{3000, 2}, {0, 40}, {70, 1}, {10, 5}, {0, 1}}},
      {5, 24, 64, 64, {{2990, 3}, {0, 70}, {130, 1}}},
      // The real widths and topk.
      {64, 128, 64, 2048, {{2990, 2}, {2040, 10}, {0, 3}}},
  };
  for (DType dt : {DType::F32, DType::BF16}) {
    for (const C& c : cases) {
      const std::string what = std::to_string(c.heads) + "x" + std::to_string(c.dim) + " bs " +
                               std::to_string(c.bs) + " topk " + std::to_string(c.topk) + " " +
                               std::string(dtype_name(dt));
      const Step st = build(c.heads, c.dim, c.bs, dt, c.seqs, rng);
      const TopK got = run(st, c.topk), want = run(st, c.topk, true);
      expect_same(got, want, what);
      // The padding rule, checked directly: n_keys < topk gives -1 after n_keys.
      int64_t t = 0;
      for (size_t s = 0; s < c.seqs.size(); ++s) {
        for (int j = 0; j < c.seqs[s].second; ++j, ++t) {
          const int n_keys = c.seqs[s].first + j + 1;
          for (int i = 0; i < c.topk; ++i)
            ASSERT_EQ(got.positions[t * c.topk + i] < 0, i >= n_keys) << what;
        }
      }
    }
  }
}

TEST_P(Indexer, PositionOrderListsTheSameKeysInPositionOrder) {
  std::mt19937 rng(16);
  const Seqs seqs = {{5000, 1}, {300, 4}, {0, 50}};
  for (int bs : {16, 64}) {
    const Step st = build(6, 40, bs, DType::F32, seqs, rng);
    const int topk = 100;
    TopK got, want;
    for (TopK* r : {&got, &want}) {
      r->slots.assign(size_t(st.tokens()) * topk, -7);
      r->positions.assign(r->slots.size(), -7);
    }
    indexer_topk(st.q.data(), st.w.data(), st.cache.data(), st.layout, st.batch(), st.heads, topk,
                 got.slots.data(), got.positions.data(), IndexerOrder::Position);
    ref::indexer_topk(st.q.data(), st.w.data(), st.cache.data(), st.layout, st.batch(), st.heads,
                      topk, want.slots.data(), want.positions.data(), IndexerOrder::Position);
    expect_same(got, want, "bs " + std::to_string(bs));
    // Against the score order: the same sets.
    const TopK by_score = run(st, topk);
    for (int64_t t = 0; t < st.tokens(); ++t) {
      std::vector<int32_t> a(got.positions.begin() + t * topk, got.positions.begin() + (t + 1) * topk);
      std::vector<int32_t> b(by_score.positions.begin() + t * topk,
                             by_score.positions.begin() + (t + 1) * topk);
      EXPECT_TRUE(std::is_sorted(a.begin(), std::find(a.begin(), a.end(), -1)));
      std::sort(a.begin(), a.end());
      std::sort(b.begin(), b.end());
      EXPECT_EQ(a, b) << "token " << t;
    }
  }
}

TEST_P(Indexer, BatchThreadsAndKeySplitsDoNotChangeResults) {
  std::mt19937 rng(12);
  // A decode row of 9000 keys: alone on 2 threads its keys split in parts.
  const Seqs seqs = {{9000, 1}, {500, 3}, {0, 20}};
  const Step st = build(8, 64, 64, DType::BF16, seqs, rng);
  const int topk = 128;
  const TopK batch = run(st, topk);
  TopK one;
  {
    ScopedThreads single(1);
    one = run(st, topk);
  }
  expect_same(batch, one, "2 threads vs 1");
  ScopedThreads two(2);
  for (int64_t t = 0; t < st.tokens(); ++t) {
    // Token t alone: its sequence with only t as the new token.
    int s = 0;
    while (st.qsl[s + 1] <= t) ++s;
    const int32_t qsl[2] = {0, 1};
    const int32_t len = st.seq_lens[s] - (st.qsl[s + 1] - st.qsl[s]) + int32_t(t - st.qsl[s]) + 1;
    const AttentionBatch alone{1, qsl, &len, st.tables.data() + s * st.max_blocks, st.max_blocks,
                               0};
    std::vector<int32_t> slots(topk), pos(topk);
    indexer_topk(st.q.data() + t * st.heads * 64, st.w.data() + t * st.heads, st.cache.data(),
                 st.layout, alone, st.heads, topk, slots.data(), pos.data());
    EXPECT_TRUE(std::equal(slots.begin(), slots.end(), batch.slots.begin() + t * topk))
        << "token " << t;
    EXPECT_TRUE(std::equal(pos.begin(), pos.end(), batch.positions.begin() + t * topk));
  }
}

TEST(IndexerCache, Fp8PageLayoutAndRoundTripMatchTheSimulation) {
  std::mt19937 rng(13);
  const int bs = 64, dim = 128, blocks = 3;
  const IndexerLayout layout{bs, dim, DType::F8E4M3};
  ASSERT_EQ(layout.page_bytes(), 64 * 132);  // 132 B per token
  auto k = random_vec(size_t(5) * dim, rng, 3.0f);
  for (int d = 0; d < dim; ++d) k[2 * dim + d] = 0.0f;  // an all-zero key
  const std::vector<int64_t> slots = {0, 63, 64 + 17, -1, 2 * 64 + 5};
  std::vector<uint8_t> cache(size_t(blocks) * layout.page_bytes(), 0xAB);
  write_indexer_k(k.data(), slots.data(), 5, layout, cache.data());
  std::vector<uint8_t> want(cache.size(), 0xAB);
  for (int t = 0; t < 5; ++t) {
    if (slots[t] < 0) continue;
    const float* x = k.data() + t * dim;
    float amax = 0;
    for (int d = 0; d < dim; ++d) amax = std::max(amax, std::fabs(x[d]));
    const float scale = amax > 0 ? amax / 448.0f : 1.0f;
    uint8_t* page = want.data() + slots[t] / bs * (bs * 132);
    const int off = int(slots[t] % bs);
    for (int d = 0; d < dim; ++d) page[off * dim + d] = e4m3_sim(x[d] / scale);
    std::memcpy(page + bs * dim + off * 4, &scale, 4);
    // Dequantised back (value * scale in f32) within half an e4m3 step.
    for (int d = 0; d < dim; ++d) {
      const float back = float(e4m3_value(page[off * dim + d])) * scale;
      EXPECT_LE(std::fabs(back - x[d]), std::fabs(x[d]) / 16 + 1e-30f) << t << " " << d;
    }
  }
  EXPECT_TRUE(cache == want) << "fp8 page bytes differ from the simulation";
  // The reference writer agrees byte for byte.
  std::vector<uint8_t> ref_cache(cache.size(), 0xAB);
  ref::write_indexer_k(k.data(), slots.data(), 5, layout, ref_cache.data());
  EXPECT_TRUE(ref_cache == want);
}

TEST(IndexerCache, F32AndBf16PagesAreTokenMajorRows) {
  std::mt19937 rng(14);
  const auto k = random_vec(2 * 16, rng);
  const std::vector<int64_t> slots = {5, 16 + 3};
  for (DType dt : {DType::F32, DType::BF16}) {
    const IndexerLayout layout{8, 16, dt};
    std::vector<uint8_t> cache(3 * layout.page_bytes(), 0);
    write_indexer_k(k.data(), slots.data(), 2, layout, cache.data());
    for (int t = 0; t < 2; ++t) {
      for (int d = 0; d < 16; ++d) {
        const size_t i = size_t(slots[t]) * 16 + d;  // element index: pages are dense rows
        const float got = dt == DType::F32 ? reinterpret_cast<const float*>(cache.data())[i]
                                           : bf16_to_f32(reinterpret_cast<const uint16_t*>(cache.data())[i]);
        EXPECT_EQ(got, dt == DType::F32 ? k[t * 16 + d] : bf16_to_f32(f32_to_bf16(k[t * 16 + d])));
      }
    }
  }
}

TEST_P(Indexer, Fp8CacheEqualsF32CacheOfTheDequantisedKeys) {
  std::mt19937 rng(15);
  const Seqs seqs = {{2500, 2}, {0, 30}, {100, 1}};
  for (int bs : {16, 64}) {
    Step st = build(6, 128, bs, DType::F8E4M3, seqs, rng);
    // Gaussian keys (integers would all share one scale pattern).
    st.keys = random_vec(st.keys.size(), rng);
    write_indexer_k(st.keys.data(), st.slots.data(), int64_t(st.slots.size()), st.layout,
                    st.cache.data());
    Step f32 = st;
    f32.layout.dtype = DType::F32;
    f32.cache.assign(size_t(st.num_blocks) * f32.layout.page_bytes(), char(0xFF));
    std::vector<float> deq(st.keys.size());
    for (size_t i = 0; i < st.slots.size(); ++i) {
      const int64_t slot = st.slots[i];
      const uint8_t* page =
          reinterpret_cast<const uint8_t*>(st.cache.data()) + slot / bs * st.layout.page_bytes();
      const int off = int(slot % bs);
      float scale;
      std::memcpy(&scale, page + bs * 128 + off * 4, 4);
      for (int d = 0; d < 128; ++d)
        deq[i * 128 + d] = float(e4m3_value(page[off * 128 + d])) * scale;
    }
    write_indexer_k(deq.data(), st.slots.data(), int64_t(st.slots.size()), f32.layout,
                    f32.cache.data());
    expect_same(run(st, 256), run(f32, 256), "bs " + std::to_string(bs));
  }
}

INSTANTIATE_TEST_SUITE_P(AllSupported, Indexer, ::testing::ValuesIn(supported_isas()),
                         isa_test_name);

}  // namespace
}  // namespace pagoda::ops::testing
