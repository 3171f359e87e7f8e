// The V4 lightning indexer's key cache in MXFP4 (ops.h IndexerLayout
// F4E2M1) through indexer_topk on every supported ISA, called as the V4
// model calls it: every query token its own 1-token sequence whose seq_len
// is its count of visible compressed keys floor((t + 1) / 4) (0 for t < 3:
// an all -1 list). Against the scalar twin exactly, and against an F32
// cache holding the dequantised keys (the same scores, so the same lists).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "ops/ops.h"
#include "ops/reference.h"
#include "ops_test_util.h"

namespace pagoda::ops::testing {
namespace {

class V4Indexer : public IsaTest {};

struct V4Step {
  int tokens = 0, heads = 0, dim = 0, bs = 0, max_blocks = 0;
  IndexerLayout fp4, f32;
  std::vector<uint8_t> fp4_cache;
  std::vector<float> f32_cache, q, w;
  std::vector<int32_t> qsl, lens, table, rows;
  AttentionBatch batch() const {
    return {tokens, qsl.data(), lens.data(), table.data(), max_blocks, 0, rows.data()};
  }
};

// Tokens 0..tokens-1 of one request: compressed key i (i < tokens / 4) at
// logical position i, pages in shuffled physical order (one shared table
// row), keys written through write_indexer_k.
V4Step build(int tokens, int heads, int dim, int bs, std::mt19937& rng) {
  V4Step st;
  st.tokens = tokens, st.heads = heads, st.dim = dim, st.bs = bs;
  const int keys = tokens / 4;
  st.max_blocks = std::max(1, (keys + bs - 1) / bs);
  const int pages = st.max_blocks + 2;
  st.fp4 = IndexerLayout{bs, dim, DType::F4E2M1, 0};
  st.f32 = IndexerLayout{bs, dim, DType::F32, 0};
  std::vector<int32_t> phys(pages);
  std::iota(phys.begin(), phys.end(), 0);
  std::shuffle(phys.begin(), phys.end(), rng);
  st.table.assign(phys.begin(), phys.begin() + st.max_blocks);
  st.fp4_cache.assign(size_t(pages) * st.fp4.page_step(), 0);
  st.f32_cache.assign(size_t(pages) * bs * dim, NAN);
  // Keys of varied magnitude per 32-block, so the scales differ.
  auto k = random_vec(size_t(keys) * dim, rng);
  for (size_t i = 0; i < k.size(); i += 32) {
    const float m = std::ldexp(1.0f, int(rng() % 9) - 4);
    for (size_t j = i; j < i + 32; ++j) k[j] *= m;
  }
  std::vector<int64_t> slots(keys);
  for (int i = 0; i < keys; ++i) slots[i] = int64_t{st.table[i / bs]} * bs + i % bs;
  write_indexer_k(k.data(), slots.data(), keys, st.fp4, st.fp4_cache.data());
  for (int i = 0; i < keys; ++i) {
    for (int d = 0; d < dim; ++d)
      st.f32_cache[slots[i] * dim + d] = ref::indexer_mxfp4_at(st.fp4_cache.data(), st.fp4, slots[i], d);
  }
  st.q = random_vec(size_t(tokens) * heads * dim, rng);
  st.w = random_vec(size_t(tokens) * heads, rng);
  for (int t = 0; t <= tokens; ++t) st.qsl.push_back(t);
  for (int t = 0; t < tokens; ++t) st.lens.push_back((t + 1) / 4);
  st.rows.assign(tokens, 0);
  return st;
}

TEST_P(V4Indexer, Mxfp4KeysMatchReferenceAndTheirF32Values) {
  std::mt19937 rng(21);
  struct C {
    int tokens, heads, dim, bs, topk;
  };
  for (const C& c : {C{300, 8, 64, 16, 12}, C{70, 64, 128, 64, 512}, C{2, 4, 32, 16, 4}}) {
    const V4Step st = build(c.tokens, c.heads, c.dim, c.bs, rng);
    const size_t n = size_t(c.tokens) * c.topk;
    std::vector<int32_t> got(n), got_pos(n), want(n), want_pos(n), f32(n), f32_pos(n);
    indexer_topk(st.q.data(), st.w.data(), st.fp4_cache.data(), st.fp4, st.batch(), c.heads,
                 c.topk, got.data(), got_pos.data());
    ref::indexer_topk(st.q.data(), st.w.data(), st.fp4_cache.data(), st.fp4, st.batch(), c.heads,
                      c.topk, want.data(), want_pos.data());
    indexer_topk(st.q.data(), st.w.data(), st.f32_cache.data(), st.f32, st.batch(), c.heads,
                 c.topk, f32.data(), f32_pos.data());
    const std::string what = std::to_string(c.tokens) + " tokens, dim " + std::to_string(c.dim);
    EXPECT_EQ(got, want) << what;
    EXPECT_EQ(got_pos, want_pos) << what;
    EXPECT_EQ(got, f32) << what;
    // Token t sees min(topk, floor((t + 1) / 4)) keys, then -1 (t < 3: none).
    for (int t = 0; t < c.tokens; ++t) {
      const int visible = std::min(c.topk, (t + 1) / 4);
      for (int i = 0; i < c.topk; ++i)
        ASSERT_EQ(got[size_t(t) * c.topk + i] < 0, i >= visible) << what << " token " << t;
    }
  }
}

TEST_P(V4Indexer, TokensThatSeeNoKeyGetEmptyLists) {
  // A batch of only t < 3 tokens (seq_len 0 each), even with no key written.
  std::mt19937 rng(22);
  const V4Step st = build(3, 4, 32, 16, rng);
  std::vector<int32_t> got(3 * 5, 7), pos(3 * 5, 7);
  indexer_topk(st.q.data(), st.w.data(), st.fp4_cache.data(), st.fp4, st.batch(), 4, 5,
               got.data(), pos.data());
  EXPECT_EQ(got, std::vector<int32_t>(15, -1));
  EXPECT_EQ(pos, std::vector<int32_t>(15, -1));
}

INSTANTIATE_TEST_SUITE_P(AllSupported, V4Indexer, ::testing::ValuesIn(supported_isas()),
                         isa_test_name);

}  // namespace
}  // namespace pagoda::ops::testing
