// The V3.2 ops chained as the model chains them: indexer_topk (position
// order) picks slots from the indexer cache, mla_sparse_attention attends
// to them in the MLA cache of the same blocks. With topk >= the context
// (every token's whole causal set) the result is mla_paged_attention's,
// bit for bit, on every ISA (the "index_topk >= T equals dense MLA" rule).
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "ops/ops.h"
#include "ops_test_util.h"

namespace pagoda::ops::testing {
namespace {

class DsaPipeline : public IsaTest {};

TEST_P(DsaPipeline, TopkPastTheContextGivesDenseMlaBits) {
  std::mt19937 rng(31);
  const int bs = 64, heads = 16, lora = 128, rope = 32, ed = lora + rope, hi = 4, dim = 32;
  const std::vector<std::pair<int, int>> seqs = {{70, 5}, {0, 9}, {1030, 1}, {3, 1}};
  for (DType dt : {DType::BF16, DType::F8E4M3}) {
    const MLALayout ml{bs, lora, rope, dt};
    const IndexerLayout il{bs, dim, dt};
    int max_blocks = 0, total = 0;
    for (auto [c, n] : seqs) {
      max_blocks = std::max(max_blocks, (c + n + bs - 1) / bs);
      total += (c + n + bs - 1) / bs;
    }
    std::vector<uint8_t> mla(size_t(total) * bs * ml.entry_bytes()), idx(size_t(total) * il.page_bytes());
    std::vector<int32_t> ids(total), tables(seqs.size() * max_blocks, -1), qsl = {0}, lens;
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    std::vector<float> q, iq, iw;
    size_t next = 0;
    for (size_t s = 0; s < seqs.size(); ++s) {
      const int len = seqs[s].first + seqs[s].second;
      for (int b = 0; b < (len + bs - 1) / bs; ++b) tables[s * max_blocks + b] = ids[next++];
      std::vector<int64_t> slots;
      for (int t = 0; t < len; ++t) slots.push_back(int64_t{tables[s * max_blocks + t / bs]} * bs + t % bs);
      const auto lat = random_vec(size_t(len) * lora, rng), pe = random_vec(size_t(len) * rope, rng);
      const auto k = random_vec(size_t(len) * dim, rng);
      write_mla_kv(lat.data(), pe.data(), slots.data(), len, ml, mla.data());
      write_indexer_k(k.data(), slots.data(), len, il, idx.data());
      for (auto* v : {&q}) {
        const auto x = random_vec(size_t(seqs[s].second) * heads * ed, rng);
        v->insert(v->end(), x.begin(), x.end());
      }
      const auto a = random_vec(size_t(seqs[s].second) * hi * dim, rng);
      iq.insert(iq.end(), a.begin(), a.end());
      const auto w = random_vec(size_t(seqs[s].second) * hi, rng);
      iw.insert(iw.end(), w.begin(), w.end());
      qsl.push_back(qsl.back() + seqs[s].second);
      lens.push_back(len);
    }
    const AttentionBatch batch{int(seqs.size()), qsl.data(), lens.data(), tables.data(), max_blocks, 0};
    const int topk = 1100;  // >= every context here
    std::vector<int32_t> picked(size_t(qsl.back()) * topk);
    indexer_topk(iq.data(), iw.data(), idx.data(), il, batch, hi, topk, picked.data(), nullptr,
                 IndexerOrder::Position);
    const float scale = 0.125f;
    std::vector<float> dense(size_t(qsl.back()) * heads * lora, NAN), sparse(dense.size(), NAN);
    mla_paged_attention(q.data(), mla.data(), ml, batch, heads, scale, dense.data());
    mla_sparse_attention(q.data(), mla.data(), ml, batch, picked.data(), topk, heads, scale,
                         sparse.data());
    EXPECT_EQ(0, std::memcmp(dense.data(), sparse.data(), dense.size() * 4)) << dtype_name(dt);
  }
}

INSTANTIATE_TEST_SUITE_P(AllSupported, DsaPipeline, ::testing::ValuesIn(supported_isas()),
                         isa_test_name);

}  // namespace
}  // namespace pagoda::ops::testing
