// DeepSeek V3.2's fp8_ds_mla latent-cache entry (ops.h MLALayout F8E4M3):
// the byte layout (656 B for 512 + 64: e4m3 latent, then one f32 scale per
// 128 values, then bf16 k_pe) against a simulation written here (an
// exhaustive-search e4m3 quantiser and the amax / 448 scale formula), the
// round-trip error, and attention over an fp8 cache (dense
// mla_paged_attention and mla_sparse_attention, every ISA) == attention over
// an f32 cache holding the dequantised values, bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "ops/ops.h"
#include "ops/reference.h"
#include "ops_test_util.h"

namespace pagoda::ops::testing {
namespace {

class MlaFp8 : public IsaTest {};

// The expected entry bytes of [latent ; k_pe], from the seed's description.
std::vector<uint8_t> simulate_entry(const float* c, const float* pe, int lora, int rope) {
  std::vector<uint8_t> e(size_t(lora) + 4 * (lora / 128) + 2 * rope);
  for (int g = 0; g < lora / 128; ++g) {
    float amax = 0;
    for (int d = 0; d < 128; ++d) amax = std::max(amax, std::fabs(c[g * 128 + d]));
    const float scale = amax > 0 ? amax / 448.0f : 1.0f;
    for (int d = 0; d < 128; ++d) e[g * 128 + d] = e4m3_sim(c[g * 128 + d] / scale);
    std::memcpy(&e[lora + 4 * g], &scale, 4);
  }
  for (int d = 0; d < rope; ++d) {
    uint32_t bits;
    std::memcpy(&bits, &pe[d], 4);
    const uint16_t h = uint16_t((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);  // RNE, finite
    std::memcpy(&e[lora + 4 * (lora / 128) + 2 * d], &h, 2);
  }
  return e;
}

// Entry bytes -> f32 [latent ; k_pe] as the format defines them.
std::vector<float> dequantise_entry(const uint8_t* e, int lora, int rope) {
  std::vector<float> v(size_t(lora + rope));
  for (int d = 0; d < lora; ++d) {
    float scale;
    std::memcpy(&scale, e + lora + 4 * (d / 128), 4);
    v[d] = float(e4m3_value(e[d])) * scale;
  }
  for (int d = 0; d < rope; ++d) {
    uint16_t h;
    std::memcpy(&h, e + lora + 4 * (lora / 128) + 2 * d, 2);
    const uint32_t bits = uint32_t(h) << 16;
    std::memcpy(&v[lora + d], &bits, 4);
  }
  return v;
}

TEST(MlaFp8Cache, EntryLayoutMatchesTheSeedAndTheSimulation) {
  const MLALayout real{64, 512, 64, DType::F8E4M3};
  EXPECT_EQ(real.entry_bytes(), 656);
  EXPECT_EQ(real.fp8_scales_offset(), 512);
  EXPECT_EQ(real.fp8_rope_offset(), 528);
  std::mt19937 rng(21);
  for (auto [lora, rope] : {std::pair{512, 64}, std::pair{256, 32}, std::pair{128, 0}}) {
    const MLALayout layout{16, lora, rope, DType::F8E4M3};
    const int n = 5;
    auto c = random_vec(size_t(n) * lora, rng, 2.0f);
    const auto pe = random_vec(size_t(n) * rope, rng);
    for (int d = 0; d < 128; ++d) c[size_t(1) * lora + d] = 0.0f;  // an all-zero group
    c[3] = 1e6f;                                                    // a wide group
    const std::vector<int64_t> slots = {3, 17, -1, 40, 0};
    std::vector<uint8_t> cache(size_t(48) * layout.entry_bytes(), 0xCD);
    write_mla_kv(c.data(), pe.data(), slots.data(), n, layout, cache.data());
    std::vector<uint8_t> want(cache.size(), 0xCD);
    for (int t = 0; t < n; ++t) {
      if (slots[t] < 0) continue;
      const auto e = simulate_entry(&c[size_t(t) * lora], rope ? &pe[size_t(t) * rope] : nullptr,
                                    lora, rope);
      std::copy(e.begin(), e.end(), want.begin() + slots[t] * layout.entry_bytes());
      // Round trip within half an e4m3 step of each value (relative 1/16).
      const auto back = dequantise_entry(e.data(), lora, rope);
      for (int d = 0; d < lora; ++d) {
        const float x = c[size_t(t) * lora + d];
        float scale = 0;  // (no lambda: clang 14 cannot capture structured bindings)
        std::memcpy(&scale, &e[lora + 4 * (d / 128)], 4);
        // e4m3 subnormals step 2^-9 * scale.
        EXPECT_LE(std::fabs(back[d] - x), std::fabs(x) / 16 + scale * 0x1p-10f) << t << " " << d;
      }
    }
    EXPECT_TRUE(cache == want) << lora << "+" << rope;
    std::vector<uint8_t> ref_cache(cache.size(), 0xCD);
    ref::write_mla_kv(c.data(), pe.data(), slots.data(), n, layout, ref_cache.data());
    EXPECT_TRUE(ref_cache == want) << "reference, " << lora << "+" << rope;
  }
}

// A mixed batch over an fp8 cache and an f32 cache holding its dequantised
// entries in the same slots.
TEST_P(MlaFp8, AttentionEqualsF32CacheOfTheDequantisedValuesBitForBit) {
  std::mt19937 rng(22);
  const int heads = 20, lora = 256, rope = 32, bs = 64, ed = lora + rope;
  const std::vector<std::pair<int, int>> seqs = {{100, 3}, {0, 7}, {1100, 1}, {5, 1}};
  const MLALayout l8{bs, lora, rope, DType::F8E4M3}, l32{bs, lora, rope, DType::F32};
  int max_blocks = 0, total = 0;
  for (auto [c, n] : seqs) {
    max_blocks = std::max(max_blocks, (c + n + bs - 1) / bs);
    total += (c + n + bs - 1) / bs;
  }
  const int num_blocks = total + 2;
  std::vector<uint8_t> c8(size_t(num_blocks) * bs * l8.entry_bytes(), 0xFF);
  std::vector<float> c32(size_t(num_blocks) * bs * ed, NAN);
  std::vector<int32_t> ids(num_blocks), tables(seqs.size() * max_blocks, -1), qsl = {0}, lens;
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<float> q;
  std::vector<int32_t> lists;
  const int topk = 300;
  size_t next = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const int len = seqs[s].first + seqs[s].second;
    for (int b = 0; b < (len + bs - 1) / bs; ++b) tables[s * max_blocks + b] = ids[next++];
    std::vector<int64_t> slots;
    for (int t = 0; t < len; ++t)
      slots.push_back(int64_t{tables[s * max_blocks + t / bs]} * bs + t % bs);
    const auto latent = random_vec(size_t(len) * lora, rng), pe = random_vec(size_t(len) * rope, rng);
    write_mla_kv(latent.data(), pe.data(), slots.data(), len, l8, c8.data());
    for (int t = 0; t < len; ++t) {
      const auto v = dequantise_entry(&c8[slots[t] * l8.entry_bytes()], lora, rope);
      std::copy(v.begin(), v.end(), c32.begin() + slots[t] * ed);
    }
    const auto qs = random_vec(size_t(seqs[s].second) * heads * ed, rng);
    q.insert(q.end(), qs.begin(), qs.end());
    for (int j = 0; j < seqs[s].second; ++j) {
      std::vector<int32_t> l(slots.begin(), slots.begin() + seqs[s].first + j + 1);
      std::shuffle(l.begin(), l.end(), rng);
      l.resize(topk, -1);
      lists.insert(lists.end(), l.begin(), l.end());
    }
    qsl.push_back(qsl.back() + seqs[s].second);
    lens.push_back(len);
  }
  const AttentionBatch batch{int(seqs.size()), qsl.data(), lens.data(), tables.data(), max_blocks,
                             0};
  const float scale = 1.0f / std::sqrt(float(ed));
  const size_t n = size_t(qsl.back()) * heads * lora;
  std::vector<float> a(n, NAN), b(n, NAN);
  mla_paged_attention(q.data(), c8.data(), l8, batch, heads, scale, a.data());
  mla_paged_attention(q.data(), c32.data(), l32, batch, heads, scale, b.data());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), n * 4)) << "dense";
  for (float x : a) ASSERT_TRUE(std::isfinite(x));
  std::fill(a.begin(), a.end(), NAN);
  std::fill(b.begin(), b.end(), NAN);
  mla_sparse_attention(q.data(), c8.data(), l8, batch, lists.data(), topk, heads, scale, a.data());
  mla_sparse_attention(q.data(), c32.data(), l32, batch, lists.data(), topk, heads, scale,
                       b.data());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), n * 4)) << "sparse";
  for (float x : a) ASSERT_TRUE(std::isfinite(x));
}

TEST(MlaFp8Cache, RefusesALoraRankNotAMultipleOf128) {
  const MLALayout layout{16, 96, 16, DType::F8E4M3};
  std::vector<float> x(112, 0.0f);
  std::vector<uint8_t> cache(4096);
  const int64_t slot = 0;
  EXPECT_ANY_THROW(write_mla_kv(x.data(), x.data() + 96, &slot, 1, layout, cache.data()));
}

INSTANTIATE_TEST_SUITE_P(AllSupported, MlaFp8, ::testing::ValuesIn(supported_isas()),
                         isa_test_name);

}  // namespace
}  // namespace pagoda::ops::testing
