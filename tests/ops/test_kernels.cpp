// Every kernel variant this CPU supports against the scalar reference
// (ops/reference.h), on random data with awkward sizes; the reference paged
// attention is itself checked against a dense attention written here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "core/parallel.h"
#include "ops/ops.h"
#include "ops/reference.h"

namespace pagoda::ops {
namespace {

std::vector<float> random_vec(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = f32_to_bf16(v[i]);
  return out;
}

// max |a - b| <= tol * max(1, max |b|)
void expect_close(const std::vector<float>& a, const std::vector<float>& b, float tol,
                  const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  float scale = 1.0f, worst = 0.0f;
  for (float x : b) scale = std::max(scale, std::fabs(x));
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  EXPECT_LE(worst, tol * scale) << what;
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
    if (isa_supported(isa)) out.push_back(isa);
  }
  return out;
}

}  // namespace

// Readable test names and messages for the ISA parameter.
void PrintTo(Isa isa, std::ostream* os) { *os << isa_name(isa); }

namespace {

class PerIsa : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override { set_isa(GetParam()); }
  void TearDown() override { set_isa(best_isa()); }
};

TEST_P(PerIsa, LinearMatchesReference) {
  std::mt19937 rng(1);
  for (int64_t k : {1, 3, 17, 64, 257, 1000}) {
    for (int64_t m : {1, 2, 5, 33}) {
      for (int64_t n : {1, 7, 130}) {
        for (DType dt : {DType::F32, DType::BF16}) {
          const auto x = random_vec(m * k, rng);
          const auto wf = random_vec(n * k, rng);
          const auto wb = to_bf16(wf);
          const auto bias = random_vec(n, rng);
          const Matrix w{dt == DType::BF16 ? static_cast<const void*>(wb.data()) : wf.data(), dt, n,
                         k};
          for (const float* b : {static_cast<const float*>(nullptr), bias.data()}) {
            std::vector<float> y(m * n), y_ref(m * n);
            linear(x.data(), m, w, b, y.data());
            ref::linear(x.data(), m, w, b, y_ref.data());
            expect_close(y, y_ref, 2e-5f * std::sqrt(static_cast<float>(k)),
                         "linear k=" + std::to_string(k) + " m=" + std::to_string(m));
          }
        }
      }
    }
  }
}

TEST_P(PerIsa, LinearRowsDoNotDependOnBatch) {
  // Greedy outputs must not depend on batch composition: row r of a batched
  // linear equals the same row computed alone, bit for bit.
  std::mt19937 rng(2);
  const int64_t k = 300, n = 50, m = 7;
  const auto x = random_vec(m * k, rng);
  const auto w = random_vec(n * k, rng);
  const Matrix mat{w.data(), DType::F32, n, k};
  std::vector<float> batched(m * n), alone(n);
  linear(x.data(), m, mat, nullptr, batched.data());
  for (int64_t r = 0; r < m; ++r) {
    linear(x.data() + r * k, 1, mat, nullptr, alone.data());
    EXPECT_TRUE(std::equal(alone.begin(), alone.end(), batched.begin() + r * n)) << "row " << r;
  }
}

TEST_P(PerIsa, ThreadCountDoesNotChangeResults) {
  std::mt19937 rng(3);
  const int64_t k = 512, n = 384, m = 3;
  const auto x = random_vec(m * k, rng);
  const auto w = random_vec(n * k, rng);
  const Matrix mat{w.data(), DType::F32, n, k};
  std::vector<float> one(m * n), two(m * n);
  set_num_threads(1);
  linear(x.data(), m, mat, nullptr, one.data());
  set_num_threads(2);
  linear(x.data(), m, mat, nullptr, two.data());
  EXPECT_EQ(one, two);
}

TEST_P(PerIsa, NormsActivationsRopeEmbedding) {
  std::mt19937 rng(4);
  for (int64_t n : {1, 8, 67, 1024}) {
    const int64_t m = 5;
    const auto x = random_vec(m * n, rng), w = random_vec(n, rng), r0 = random_vec(m * n, rng);
    std::vector<float> y(m * n), y_ref(m * n);
    rms_norm(x.data(), w.data(), m, n, 1e-5f, y.data());
    ref::rms_norm(x.data(), w.data(), m, n, 1e-5f, y_ref.data());
    expect_close(y, y_ref, 1e-5f, "rms_norm");
    auto res = r0, res_ref = r0;
    add_rms_norm(res.data(), x.data(), w.data(), m, n, 1e-6f, y.data());
    ref::add_rms_norm(res_ref.data(), x.data(), w.data(), m, n, 1e-6f, y_ref.data());
    expect_close(res, res_ref, 1e-6f, "add_rms_norm residual");
    expect_close(y, y_ref, 1e-5f, "add_rms_norm");

    const auto gu = random_vec(m * 2 * n, rng, 3.0f);
    std::vector<float> act(m * n), act_ref(m * n);
    silu_mul(gu.data(), m, n, act.data());
    ref::silu_mul(gu.data(), m, n, act_ref.data());
    expect_close(act, act_ref, 1e-5f, "silu_mul");

    auto s = random_vec(n, rng, 5.0f), s_ref = s;
    softmax(s.data(), n);
    ref::softmax(s_ref.data(), n);
    expect_close(s, s_ref, 1e-5f, "softmax");
  }
  for (int head_dim : {8, 16, 64, 128}) {
    for (int rot_dim : {head_dim, head_dim / 2}) {
      const int64_t tokens = 6;
      const int heads = 3;
      auto x = random_vec(tokens * heads * head_dim, rng), x_ref = x;
      std::vector<int32_t> pos = {0, 1, 7, 100, 511, 4000};
      std::vector<float> inv_freq(rot_dim / 2);
      for (int i = 0; i < rot_dim / 2; ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * i / rot_dim);
      rope(x.data(), tokens, heads, head_dim, pos.data(), inv_freq.data(), rot_dim);
      ref::rope(x_ref.data(), tokens, heads, head_dim, pos.data(), inv_freq.data(), rot_dim);
      expect_close(x, x_ref, 2e-5f, "rope");
    }
  }
  const int64_t vocab = 40, d = 24;
  const auto table = random_vec(vocab * d, rng);
  const auto table_bf16 = to_bf16(table);
  const std::vector<int32_t> ids = {0, 39, 5, 5};
  for (DType dt : {DType::F32, DType::BF16}) {
    const Matrix t{dt == DType::BF16 ? static_cast<const void*>(table_bf16.data()) : table.data(),
                   dt, vocab, d};
    std::vector<float> e(ids.size() * d), e_ref(ids.size() * d);
    embedding(ids.data(), 4, t, e.data());
    ref::embedding(ids.data(), 4, t, e_ref.data());
    EXPECT_EQ(e, e_ref);
  }
}

// A dense causal attention over contiguous K/V, independent of paging.
void dense_attention(const std::vector<float>& q, const std::vector<std::vector<float>>& keys,
                     const std::vector<std::vector<float>>& values, int64_t num_new, int q_heads,
                     int kv_heads, int hd, int window, float scale, float* out) {
  const auto len = static_cast<int64_t>(keys.size());  // keys[t]: [kv_heads * hd]
  for (int64_t j = 0; j < num_new; ++j) {
    const int64_t last = len - num_new + j;
    for (int h = 0; h < q_heads; ++h) {
      const int kvh = h / (q_heads / kv_heads);
      std::vector<double> p;
      double mx = -1e300;
      for (int64_t t = 0; t <= last; ++t) {
        if (window > 0 && last - t >= window) {
          p.push_back(-1e300);
          continue;
        }
        double dot = 0;
        for (int d = 0; d < hd; ++d)
          dot += double{q[(j * q_heads + h) * hd + d]} * keys[t][kvh * hd + d];
        p.push_back(dot * scale);
        mx = std::max(mx, p.back());
      }
      double sum = 0;
      for (double& v : p) sum += (v = v <= -1e299 ? 0 : std::exp(v - mx));
      for (int d = 0; d < hd; ++d) {
        double acc = 0;
        for (int64_t t = 0; t <= last; ++t) acc += p[t] * values[t][kvh * hd + d];
        out[(j * q_heads + h) * hd + d] = static_cast<float>(acc / sum);
      }
    }
  }
}

struct AttentionCase {
  int q_heads, kv_heads, head_dim, block_size, window;
};

TEST_P(PerIsa, PagedAttentionMatchesDenseAndReference) {
  std::mt19937 rng(5);
  const std::vector<AttentionCase> cases = {{4, 4, 8, 16, 0},  {8, 4, 8, 1, 0},  {8, 2, 64, 3, 0},
                                            {4, 1, 40, 16, 0}, {8, 2, 16, 4, 5}, {2, 2, 8, 7, 1}};
  for (const AttentionCase& c : cases) {
    // Sequences: (cached tokens, new tokens): prefill with a cached prefix,
    // plain prefill, decode, mixed.
    const std::vector<std::pair<int, int>> seqs = {{10, 5}, {0, 9}, {23, 1}, {1, 1}, {40, 3}};
    const int num_blocks = 160;  // enough for every case (block size 1 needs 93)
    const int row = c.kv_heads * c.head_dim;
    KVLayout layout{c.block_size, c.kv_heads, c.head_dim};
    std::vector<float> k_cache(num_blocks * c.block_size * row, NAN), v_cache = k_cache;
    std::vector<int32_t> free_blocks(num_blocks);
    std::iota(free_blocks.begin(), free_blocks.end(), 0);
    std::shuffle(free_blocks.begin(), free_blocks.end(), rng);  // non-contiguous tables

    int max_blocks = 0;
    for (auto [cached, fresh] : seqs)
      max_blocks = std::max(max_blocks, (cached + fresh + c.block_size - 1) / c.block_size);
    std::vector<int32_t> tables(seqs.size() * max_blocks, 0), qsl = {0}, seq_lens;
    std::vector<std::vector<std::vector<float>>> keys(seqs.size()), values(seqs.size());
    std::vector<float> q;
    size_t next_free = 0;
    for (size_t s = 0; s < seqs.size(); ++s) {
      const int len = seqs[s].first + seqs[s].second;
      for (int b = 0; b < (len + c.block_size - 1) / c.block_size; ++b)
        tables[s * max_blocks + b] = free_blocks[next_free++];
      for (int t = 0; t < len; ++t) {
        keys[s].push_back(random_vec(row, rng));
        values[s].push_back(random_vec(row, rng));
        const int64_t slot =
            int64_t{tables[s * max_blocks + t / c.block_size]} * c.block_size + t % c.block_size;
        std::vector<int64_t> slots = {slot};
        write_kv(keys[s][t].data(), values[s][t].data(), slots.data(), 1, layout, k_cache.data(),
                 v_cache.data());
      }
      const auto qs = random_vec(seqs[s].second * c.q_heads * c.head_dim, rng);
      q.insert(q.end(), qs.begin(), qs.end());
      qsl.push_back(qsl.back() + seqs[s].second);
      seq_lens.push_back(len);
    }
    AttentionBatch batch{static_cast<int>(seqs.size()),
                         qsl.data(),
                         seq_lens.data(),
                         tables.data(),
                         max_blocks,
                         c.window};
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    std::vector<float> out(q.size()), out_ref(q.size()), out_dense(q.size());
    paged_attention(q.data(), k_cache.data(), v_cache.data(), layout, batch, c.q_heads, scale,
                    out.data());
    ref::paged_attention(q.data(), k_cache.data(), v_cache.data(), layout, batch, c.q_heads, scale,
                         out_ref.data());
    for (size_t s = 0; s < seqs.size(); ++s) {
      std::vector<float> qs(q.begin() + qsl[s] * c.q_heads * c.head_dim,
                            q.begin() + qsl[s + 1] * c.q_heads * c.head_dim);
      dense_attention(qs, keys[s], values[s], seqs[s].second, c.q_heads, c.kv_heads, c.head_dim,
                      c.window, scale, out_dense.data() + qsl[s] * c.q_heads * c.head_dim);
    }
    const std::string what = "heads " + std::to_string(c.q_heads) + "/" +
                             std::to_string(c.kv_heads) + " hd " + std::to_string(c.head_dim) +
                             " bs " + std::to_string(c.block_size) + " window " +
                             std::to_string(c.window);
    expect_close(out_ref, out_dense, 1e-5f, "reference vs dense, " + what);
    expect_close(out, out_ref, 1e-5f, "kernel vs reference, " + what);
  }
}

TEST(Kernels, WriteKvSkipsNegativeSlots) {
  KVLayout layout{2, 1, 2};
  std::vector<float> k_cache(8, 0), v_cache(8, 0);
  const std::vector<float> k = {1, 2, 3, 4}, v = {5, 6, 7, 8};
  const std::vector<int64_t> slots = {3, -1};
  write_kv(k.data(), v.data(), slots.data(), 2, layout, k_cache.data(), v_cache.data());
  EXPECT_EQ(k_cache, (std::vector<float>{0, 0, 0, 0, 0, 0, 1, 2}));
  EXPECT_EQ(v_cache, (std::vector<float>{0, 0, 0, 0, 0, 0, 5, 6}));
}

TEST(Kernels, DispatchReportsAndRejects) {
  EXPECT_TRUE(isa_supported(Isa::Scalar));
  EXPECT_EQ(current_isa(), best_isa());
  if (!isa_supported(Isa::Avx512)) EXPECT_ANY_THROW(set_isa(Isa::Avx512));
}

INSTANTIATE_TEST_SUITE_P(AllSupported, PerIsa, ::testing::ValuesIn(supported_isas()),
                         [](const auto& info) { return std::string(isa_name(info.param)); });

}  // namespace
}  // namespace pagoda::ops
