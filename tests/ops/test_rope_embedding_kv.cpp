// rope, embedding and write_kv: against the reference and against facts
// that hold by definition (position 0 is the identity, rotation keeps pair
// norms, partial rotary leaves the tail alone, slots land where computed).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/ops.h"
#include "ops/reference.h"
#include "ops_test_util.h"

namespace pagoda::ops::testing {
namespace {

class RopeEmbeddingKv : public IsaTest {};

std::vector<float> hf_inv_freq(int rot_dim, float theta) {
  std::vector<float> inv_freq(rot_dim / 2);
  for (int i = 0; i < rot_dim / 2; ++i) {
    inv_freq[i] = 1.0f / std::pow(theta, static_cast<float>(2 * i) / rot_dim);
  }
  return inv_freq;
}

TEST_P(RopeEmbeddingKv, RopeMatchesReferenceAndDefinition) {
  std::mt19937 rng(20);
  const std::vector<int32_t> pos = {0, 1, 7, 100, 511, 4000};
  const int64_t tokens = static_cast<int64_t>(pos.size());
  const int heads = 3;
  for (int head_dim : {8, 12, 64, 128, 520}) {  // 520: beyond the stack scratch
    for (int rot_dim : {head_dim, head_dim / 2}) {
      const std::string what = "hd " + std::to_string(head_dim) + " rot " + std::to_string(rot_dim);
      const auto inv_freq = hf_inv_freq(rot_dim, 10000.0f);
      const auto x0 = random_vec(tokens * heads * head_dim, rng);
      auto x = x0, x_ref = x0;
      rope(x.data(), tokens, heads, head_dim, pos.data(), inv_freq.data(), rot_dim);
      ref::rope(x_ref.data(), tokens, heads, head_dim, pos.data(), inv_freq.data(), rot_dim);
      expect_close(x, x_ref, 2e-5f, "rope " + what);
      const int half = rot_dim / 2;
      for (int64_t t = 0; t < tokens; ++t) {
        for (int h = 0; h < heads; ++h) {
          const int64_t base = (t * heads + h) * head_dim;
          for (int i = 0; i < half; ++i) {
            const float a = x0[base + i], b = x0[base + i + half];
            const float ra = x[base + i], rb = x[base + i + half];
            if (pos[t] == 0) {
              EXPECT_EQ(ra, a) << what;
              EXPECT_EQ(rb, b) << what;
            }
            EXPECT_NEAR(ra * ra + rb * rb, a * a + b * b, 1e-4f * (1 + a * a + b * b)) << what;
          }
          for (int i = rot_dim; i < head_dim; ++i) {
            EXPECT_EQ(x[base + i], x0[base + i]) << "partial rotary tail, " << what;
          }
        }
      }
    }
  }
}

TEST_P(RopeEmbeddingKv, EmbeddingGathersRows) {
  std::mt19937 rng(21);
  const int64_t vocab = 40, d = 24;
  const auto table = random_vec(vocab * d, rng);
  const auto table_bf16 = to_bf16(table);
  const std::vector<int32_t> ids = {0, 39, 5, 5};
  for (DType dt : {DType::F32, DType::BF16}) {
    const Matrix t{dt == DType::BF16 ? static_cast<const void*>(table_bf16.data()) : table.data(),
                   dt, vocab, d};
    std::vector<float> e(ids.size() * d, NAN), e_ref(ids.size() * d);
    embedding(ids.data(), 4, t, e.data());
    ref::embedding(ids.data(), 4, t, e_ref.data());
    EXPECT_EQ(e, e_ref) << dtype_name(dt);
    for (int64_t j = 0; j < d; ++j) {
      const float want =
          dt == DType::BF16 ? bf16_to_f32(table_bf16[39 * d + j]) : table[39 * d + j];
      EXPECT_EQ(e[1 * d + j], want);
    }
  }
  const std::vector<int32_t> bad = {40};
  std::vector<float> out(d);
  EXPECT_THROW(embedding(bad.data(), 1, Matrix{table.data(), DType::F32, vocab, d}, out.data()),
               InternalError);
}

TEST_P(RopeEmbeddingKv, WriteKvStoresRowsAtTheirSlots) {
  std::mt19937 rng(22);
  const KVLayout layout{4, 2, 3};  // block_size 4, 2 kv heads, head_dim 3
  const int64_t row = 2 * 3, num_blocks = 5, tokens = 5;
  const auto k = random_vec(tokens * row, rng), v = random_vec(tokens * row, rng);
  // Slots: block 3 offset 1, padding, block 0 offset 0, block 4 offset 3, padding.
  const std::vector<int64_t> slots = {13, -1, 0, 19, -7};
  std::vector<float> k_cache(num_blocks * 4 * row, -5.0f), v_cache = k_cache;
  auto k_ref = k_cache, v_ref = v_cache;
  write_kv(k.data(), v.data(), slots.data(), tokens, layout, k_cache.data(), v_cache.data());
  ref::write_kv(k.data(), v.data(), slots.data(), tokens, layout, k_ref.data(), v_ref.data());
  EXPECT_EQ(k_cache, k_ref);
  EXPECT_EQ(v_cache, v_ref);
  // Element (block, offset, head, dim) lives at ((block * bs + offset) * heads + head) * hd + dim.
  std::vector<float> k_want(k_cache.size(), -5.0f), v_want = k_want;
  for (int64_t t = 0; t < tokens; ++t) {
    if (slots[t] < 0) continue;
    const int64_t block = slots[t] / 4, offset = slots[t] % 4;
    for (int h = 0; h < 2; ++h) {
      for (int d = 0; d < 3; ++d) {
        const int64_t at = ((block * 4 + offset) * 2 + h) * 3 + d;
        k_want[at] = k[(t * 2 + h) * 3 + d];
        v_want[at] = v[(t * 2 + h) * 3 + d];
      }
    }
  }
  EXPECT_EQ(k_cache, k_want);
  EXPECT_EQ(v_cache, v_want);
}

INSTANTIATE_TEST_SUITE_P(AllSupported, RopeEmbeddingKv, ::testing::ValuesIn(supported_isas()),
                         isa_test_name);

}  // namespace
}  // namespace pagoda::ops::testing
