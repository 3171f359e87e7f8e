// Sparse MLA attention (DeepSeek V3.2 DSA) on every supported ISA: the
// causal set in position order (with -1 padding anywhere) == the dense
// mla_paged_attention bit for bit, random subsets in random order against
// the scalar reference, a token alone == its row in a batch and 1 thread
// == 2 threads bit for bit, an empty list gives zeros.
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

class MlaSparse : public IsaTest {};

using Seqs = std::vector<std::pair<int, int>>;  // {cached tokens, new tokens}

// A paged latent cache written through write_mla_kv over shuffled block
// ids (NaN in unwritten slots), queries, the batch, and each token's causal
// slots in position order.
struct Step {
  MLALayout layout;
  int max_blocks = 0, heads = 0;
  std::vector<float> f32;
  std::vector<uint16_t> bf16;
  std::vector<float> q;
  std::vector<int32_t> tables, qsl = {0}, seq_lens;
  std::vector<std::vector<int32_t>> causal;  // per query token
  const void* cache() const {
    return layout.dtype == DType::BF16 ? (const void*)bf16.data() : f32.data();
  }
  AttentionBatch batch() const {
    return {static_cast<int>(seq_lens.size()), qsl.data(), seq_lens.data(), tables.data(),
            max_blocks, 0};
  }
  float scale() const { return 1.0f / std::sqrt(float(layout.entry_dim())); }
};

Step build(int heads, int lora, int rope, int bs, DType dt, const Seqs& seqs, std::mt19937& rng) {
  Step st;
  st.heads = heads;
  st.layout = MLALayout{bs, lora, rope, dt};
  const int ed = st.layout.entry_dim();
  int total = 0;
  for (auto [c, n] : seqs) {
    const int b = (c + n + bs - 1) / bs;
    st.max_blocks = std::max(st.max_blocks, b);
    total += b;
  }
  const int num_blocks = total + 3;
  const size_t elems = size_t(num_blocks) * bs * ed;
  if (dt == DType::BF16) st.bf16.assign(elems, f32_to_bf16(NAN));
  else st.f32.assign(elems, NAN);
  void* cache = dt == DType::BF16 ? (void*)st.bf16.data() : st.f32.data();
  std::vector<int32_t> ids(num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  st.tables.assign(seqs.size() * st.max_blocks, -1);
  size_t next = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const int len = seqs[s].first + seqs[s].second;
    for (int b = 0; b < (len + bs - 1) / bs; ++b) st.tables[s * st.max_blocks + b] = ids[next++];
    const auto latent = random_vec(size_t(len) * lora, rng);
    const auto pe = random_vec(size_t(len) * rope, rng);
    std::vector<int64_t> slots;
    for (int t = 0; t < len; ++t)
      slots.push_back(int64_t{st.tables[s * st.max_blocks + t / bs]} * bs + t % bs);
    write_mla_kv(latent.data(), pe.data(), slots.data(), len, st.layout, cache);
    const auto qs = random_vec(size_t(seqs[s].second) * heads * ed, rng);
    st.q.insert(st.q.end(), qs.begin(), qs.end());
    st.qsl.push_back(st.qsl.back() + seqs[s].second);
    st.seq_lens.push_back(len);
    for (int j = 0; j < seqs[s].second; ++j) {
      const int last = seqs[s].first + j;
      st.causal.emplace_back(slots.begin(), slots.begin() + last + 1);
    }
  }
  return st;
}

// Lists [tokens, topk] from per-token slot lists: each list's slots in
// order with `pads` -1 entries at random places, then -1 to topk.
std::vector<int32_t> lists_of(const std::vector<std::vector<int32_t>>& sets, int topk, int pads,
                              std::mt19937& rng) {
  std::vector<int32_t> out;
  for (const auto& set : sets) {
    std::vector<int32_t> l = set;
    for (int p = 0; p < pads && int(l.size()) < topk; ++p)
      l.insert(l.begin() + std::uniform_int_distribution<size_t>(0, l.size())(rng), -1);
    l.resize(topk, -1);
    out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

int max_len(const std::vector<std::vector<int32_t>>& sets) {
  size_t m = 0;
  for (const auto& s : sets) m = std::max(m, s.size());
  return int(m);
}

bool bits_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST_P(MlaSparse, CausalSetInPositionOrderEqualsDenseBitForBit) {
  std::mt19937 rng(1);
  // Mixed prefill chunks and decodes; a row past kMlaSegmentKeys (1024)
  // keys so segment merges are covered; 128 heads = several head blocks.
  const Seqs seqs = {{10, 5}, {0, 9}, {23, 1}, {1100, 2}, {40, 3}, {0, 1}};
  struct C { int heads, lora, rope, bs; };
  for (DType dt : {DType::F32, DType::BF16}) {
    for (C c : {C{4, 64, 16, 16}, C{3, 40, 8, 64}, C{128, 64, 16, 64}, C{16, 512, 64, 64}}) {
      SCOPED_TRACE(std::to_string(c.heads) + " heads " + std::to_string(c.lora) + " bs " +
                   std::to_string(c.bs) + " " + std::string(dtype_name(dt)));
      const Step st = build(c.heads, c.lora, c.rope, c.bs, dt, seqs, rng);
      const size_t n = size_t(st.qsl.back()) * c.heads * c.lora;
      std::vector<float> dense(n, NAN), sparse(n, NAN);
      mla_paged_attention(st.q.data(), st.cache(), st.layout, st.batch(), c.heads, st.scale(),
                          dense.data());
      const int topk = max_len(st.causal) + 7;
      for (int pads : {0, 5}) {
        const auto lists = lists_of(st.causal, topk, pads, rng);
        mla_sparse_attention(st.q.data(), st.cache(), st.layout, st.batch(), lists.data(), topk,
                             c.heads, st.scale(), sparse.data());
        EXPECT_TRUE(bits_equal(sparse, dense)) << "pads " << pads;
      }
    }
  }
}

TEST_P(MlaSparse, RandomSubsetsInRandomOrderMatchReference) {
  std::mt19937 rng(2);
  const Seqs seqs = {{30, 4}, {0, 6}, {200, 1}, {1500, 1}, {5, 2}};
  for (DType dt : {DType::F32, DType::BF16}) {
    for (int bs : {16, 64}) {
      const Step st = build(8, 64, 16, bs, dt, seqs, rng);
      const int topk = 1200;  // > kMlaSegmentKeys: the long row's subset has two segments
      std::vector<std::vector<int32_t>> sets;
      for (const auto& all : st.causal) {
        std::vector<int32_t> s = all;
        std::shuffle(s.begin(), s.end(), rng);
        s.resize(std::min<size_t>(s.size(), std::uniform_int_distribution<size_t>(1, topk - 20)(rng)));
        sets.push_back(s);
      }
      const auto lists = lists_of(sets, topk, 9, rng);
      const size_t n = size_t(st.qsl.back()) * 8 * 64;
      std::vector<float> out(n, NAN), want(n, NAN);
      mla_sparse_attention(st.q.data(), st.cache(), st.layout, st.batch(), lists.data(), topk, 8,
                           st.scale(), out.data());
      ref::mla_sparse_attention(st.q.data(), st.cache(), st.layout, st.batch(), lists.data(), topk,
                                8, st.scale(), want.data());
      expect_close(out, want, 2e-5f, std::string("bs ") + std::to_string(bs) + std::string(dtype_name(dt)));
    }
  }
}

TEST_P(MlaSparse, TokenAloneEqualsItsRowInTheBatchAndThreadsDoNotMatter) {
  std::mt19937 rng(3);
  const Seqs seqs = {{60, 3}, {300, 1}, {0, 5}};
  const int heads = 40;
  const Step st = build(heads, 64, 16, 16, DType::BF16, seqs, rng);
  const int topk = 64;
  std::vector<std::vector<int32_t>> sets;
  for (const auto& all : st.causal) {
    std::vector<int32_t> s = all;
    std::shuffle(s.begin(), s.end(), rng);
    s.resize(std::min<size_t>(s.size(), topk));
    sets.push_back(s);
  }
  const auto lists = lists_of(sets, topk, 0, rng);
  const int64_t tokens = st.qsl.back(), ed = st.layout.entry_dim(), row = int64_t{heads} * 64;
  std::vector<float> batch_out(size_t(tokens) * row, NAN), one_thread(batch_out.size(), NAN);
  mla_sparse_attention(st.q.data(), st.cache(), st.layout, st.batch(), lists.data(), topk, heads,
                       st.scale(), batch_out.data());
  {
    ScopedThreads one(1);
    mla_sparse_attention(st.q.data(), st.cache(), st.layout, st.batch(), lists.data(), topk, heads,
                         st.scale(), one_thread.data());
  }
  EXPECT_TRUE(bits_equal(batch_out, one_thread));
  for (int64_t t = 0; t < tokens; ++t) {
    const int32_t qsl[2] = {0, 1}, len = 1, table = 0;
    const AttentionBatch alone{1, qsl, &len, &table, 1, 0};
    std::vector<float> out(size_t(row), NAN);
    mla_sparse_attention(st.q.data() + t * heads * ed, st.cache(), st.layout, alone,
                         lists.data() + t * topk, topk, heads, st.scale(), out.data());
    EXPECT_EQ(0, std::memcmp(out.data(), batch_out.data() + t * row, row * sizeof(float)))
        << "token " << t;
  }
}

TEST_P(MlaSparse, StridedQAndHeadMajorOutGiveTheSameBits) {
  std::mt19937 rng(5);
  const int heads = 6, lora = 64, ed = 80;
  const Step st = build(heads, lora, 16, 16, DType::F32, {{40, 3}, {0, 2}}, rng);
  const int topk = 48;
  const auto lists = lists_of(st.causal, topk, 2, rng);
  const int64_t T = st.qsl.back();
  std::vector<float> plain(size_t(T) * heads * lora, NAN);
  mla_sparse_attention(st.q.data(), st.cache(), st.layout, st.batch(), lists.data(), topk, heads,
                       st.scale(), plain.data());
  // q rows padded to a wider token stride; out head-major [heads, T, lora].
  const int64_t q_tok = int64_t{heads} * ed + 7;
  std::vector<float> wide(size_t(T) * q_tok, NAN), hm(plain.size(), NAN);
  for (int64_t t = 0; t < T; ++t)
    std::copy(st.q.begin() + t * heads * ed, st.q.begin() + (t + 1) * heads * ed,
              wide.begin() + t * q_tok);
  MlaStrides strides;
  strides.q_token = q_tok;
  strides.out_token = lora;
  strides.out_head = T * lora;
  mla_sparse_attention(wide.data(), st.cache(), st.layout, st.batch(), lists.data(), topk, heads,
                       st.scale(), hm.data(), strides);
  for (int64_t t = 0; t < T; ++t)
    for (int h = 0; h < heads; ++h)
      EXPECT_EQ(0, std::memcmp(&plain[(t * heads + h) * lora], &hm[(h * T + t) * lora], lora * 4))
          << t << " " << h;
}

TEST_P(MlaSparse, EmptyListGivesZeros) {
  std::mt19937 rng(4);
  const Step st = build(2, 64, 16, 16, DType::F32, {{3, 1}}, rng);
  const std::vector<int32_t> lists(8, -1);
  std::vector<float> out(2 * 64, NAN);
  mla_sparse_attention(st.q.data(), st.cache(), st.layout, st.batch(), lists.data(), 8, 2,
                       st.scale(), out.data());
  for (float x : out) ASSERT_EQ(x, 0.0f);
}

INSTANTIATE_TEST_SUITE_P(AllSupported, MlaSparse, ::testing::ValuesIn(supported_isas()),
                         isa_test_name);

}  // namespace
}  // namespace pagoda::ops::testing
