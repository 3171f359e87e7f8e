// rope, embedding and write_kv: against the reference and against facts
// that hold by definition (position 0 is the identity, rotation keeps pair
// norms, partial rotary leaves the tail alone, slots land where computed,
// a bf16 cache holds each value rounded to nearest even).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
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
  // Element (block, offset, head, dim) lives at ((block * heads + head) * bs + offset) * hd + dim.
  std::vector<float> k_want(k_cache.size(), -5.0f), v_want = k_want;
  for (int64_t t = 0; t < tokens; ++t) {
    if (slots[t] < 0) continue;
    const int64_t block = slots[t] / 4, offset = slots[t] % 4;
    for (int h = 0; h < 2; ++h) {
      for (int d = 0; d < 3; ++d) {
        const int64_t at = ((block * 2 + h) * 4 + offset) * 3 + d;
        k_want[at] = k[(t * 2 + h) * 3 + d];
        v_want[at] = v[(t * 2 + h) * 3 + d];
      }
    }
  }
  EXPECT_EQ(k_cache, k_want);
  EXPECT_EQ(v_cache, v_want);
}

// The bf16 bits of x rounded to nearest even, from the definition on the
// f32 bits (no shared code with core/dtype.h): keep the top 16 bits, add
// one when the dropped half is above 0x8000, or equal to it and the kept
// part is odd. Finite inputs only.
uint16_t bf16_nearest_even(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  const uint32_t kept = bits >> 16, dropped = bits & 0xffffu;
  const bool up = dropped > 0x8000u || (dropped == 0x8000u && (kept & 1u));
  return static_cast<uint16_t>(kept + (up ? 1u : 0u));
}

TEST(Bf16Rounding, TheTestsRoundingMatchesKnownCases) {
  // Ties go to the even neighbour; 1 + 2^-8 is half a bf16 ulp above 1.
  EXPECT_EQ(bf16_nearest_even(1.0f), 0x3f80);
  EXPECT_EQ(bf16_nearest_even(1.0f + 0x1p-8f), 0x3f80);             // tie, down to even
  EXPECT_EQ(bf16_nearest_even(1.0f + 0x1p-7f + 0x1p-8f), 0x3f82);   // tie, up to even
  EXPECT_EQ(bf16_nearest_even(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);  // above the tie
  EXPECT_EQ(bf16_nearest_even(-2.0f), 0xc000);
  EXPECT_EQ(bf16_nearest_even(3.0e38f), 0x7f62);                            // 0x7f61bxxx rounds up
  EXPECT_EQ(bf16_nearest_even(std::numeric_limits<float>::max()), 0x7f80);  // overflows to inf
}

TEST_P(RopeEmbeddingKv, WriteKvToABf16CacheRoundsToNearestEven) {
  // Random rows plus hand-picked ties, signs, a subnormal and f32 max in one
  // token's rows: each cache element must be the nearest-even bf16 of its
  // input, at the slot the f32 layout gives, and match the reference.
  std::mt19937 rng(23);
  const KVLayout layout{4, 2, 8, DType::BF16};
  const int64_t row = 2 * 8, num_blocks = 3, tokens = 4;
  auto k = random_vec(tokens * row, rng), v = random_vec(tokens * row, rng);
  const float specials[] = {
      1.0f + 0x1p-8f, 1.0f + 0x1p-7f + 0x1p-8f,          -(1.0f + 0x1p-8f), 0.0f, -0.0f,
      0x1p-140f,      std::numeric_limits<float>::max(), 65504.5f};
  for (size_t i = 0; i < std::size(specials); ++i) k[i] = v[row - 1 - i] = specials[i];
  const std::vector<int64_t> slots = {5, -1, 0, 11};
  const uint16_t fill = 0x1234;
  std::vector<uint16_t> k_cache(num_blocks * 4 * row, fill), v_cache = k_cache;
  auto k_ref = k_cache, v_ref = v_cache;
  write_kv(k.data(), v.data(), slots.data(), tokens, layout, k_cache.data(), v_cache.data());
  ref::write_kv(k.data(), v.data(), slots.data(), tokens, layout, k_ref.data(), v_ref.data());
  EXPECT_EQ(k_cache, k_ref);
  EXPECT_EQ(v_cache, v_ref);
  std::vector<uint16_t> k_want(k_cache.size(), fill), v_want = k_want;
  for (int64_t t = 0; t < tokens; ++t) {
    if (slots[t] < 0) continue;
    const int64_t block = slots[t] / 4, offset = slots[t] % 4;
    for (int h = 0; h < 2; ++h) {
      for (int d = 0; d < 8; ++d) {
        const int64_t at = ((block * 2 + h) * 4 + offset) * 8 + d;
        k_want[at] = bf16_nearest_even(k[(t * 2 + h) * 8 + d]);
        v_want[at] = bf16_nearest_even(v[(t * 2 + h) * 8 + d]);
      }
    }
  }
  EXPECT_EQ(k_cache, k_want);
  EXPECT_EQ(v_cache, v_want);
}

// A cache buffer's bytes as 16-bit words (bf16 elements, or f32 halves).
std::vector<uint16_t> bits16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size() * 2);
  std::memcpy(out.data(), v.data(), v.size() * sizeof(float));
  return out;
}

TEST_P(RopeEmbeddingKv, FusedAttentionInputsEqualTheSeparateOps) {
  // prepare_attention_inputs against rms_norm + rope + write_kv run one
  // after another: the same bits, with and without qk-norm, with partial
  // rotary, a padding token (slot -1) and more q heads than kv heads.
  std::mt19937 rng(21);
  const std::vector<int32_t> pos = {3, 0, 17, 250, 9};
  const std::vector<int64_t> slots = {5, -1, 0, 11, 2};
  const auto tokens = static_cast<int64_t>(pos.size());
  for (DType kv_dtype : {DType::F32, DType::BF16}) {
    for (int head_dim : {12, 64}) {
      for (bool qk_norm : {false, true}) {
        for (int rot_dim : {head_dim, head_dim / 2}) {
          const int q_heads = 4, kv_heads = 2;
          const KVLayout layout{4, kv_heads, head_dim, kv_dtype};
          const int64_t cache_floats = int64_t{4} * 4 * kv_heads * head_dim;
          const auto inv_freq = hf_inv_freq(rot_dim, 10000.0f);
          const auto q_norm = random_vec(head_dim, rng), k_norm = random_vec(head_dim, rng);
          const auto q0 = random_vec(tokens * q_heads * head_dim, rng);
          const auto k0 = random_vec(tokens * kv_heads * head_dim, rng);
          const auto v = random_vec(tokens * kv_heads * head_dim, rng);
          const float eps = 1e-6f;

          auto q_sep = q0, k_sep = k0;
          // Cache storage for either dtype (bf16 uses the first half).
          std::vector<float> kc_sep(cache_floats, 0.5f), vc_sep = kc_sep;
          if (qk_norm) {
            rms_norm(q_sep.data(), q_norm.data(), tokens * q_heads, head_dim, eps, q_sep.data());
            rms_norm(k_sep.data(), k_norm.data(), tokens * kv_heads, head_dim, eps, k_sep.data());
          }
          rope(q_sep.data(), tokens, q_heads, head_dim, pos.data(), inv_freq.data(), rot_dim);
          rope(k_sep.data(), tokens, kv_heads, head_dim, pos.data(), inv_freq.data(), rot_dim);
          write_kv(k_sep.data(), v.data(), slots.data(), tokens, layout, kc_sep.data(),
                   vc_sep.data());

          auto q = q0, k = k0;
          std::vector<float> kc(cache_floats, 0.5f), vc = kc;
          AttentionInputs in;
          in.q = q.data();
          in.k = k.data();
          in.v = v.data();
          in.num_tokens = tokens;
          in.num_q_heads = q_heads;
          in.q_norm = qk_norm ? q_norm.data() : nullptr;
          in.k_norm = qk_norm ? k_norm.data() : nullptr;
          in.eps = eps;
          in.positions = pos.data();
          in.inv_freq = inv_freq.data();
          in.rot_dim = rot_dim;
          in.slot_mapping = slots.data();
          prepare_attention_inputs(in, layout, kc.data(), vc.data());
          const std::string what = "hd " + std::to_string(head_dim) + " rot " +
                                   std::to_string(rot_dim) + (qk_norm ? " qk-norm" : "") + " kv " +
                                   std::string(dtype_name(kv_dtype));
          EXPECT_EQ(q, q_sep) << what;
          EXPECT_EQ(k, k_sep) << what;
          EXPECT_EQ(bits16(kc), bits16(kc_sep)) << what;  // bitwise, for either dtype
          EXPECT_EQ(bits16(vc), bits16(vc_sep)) << what;
          // The angles computed once for every layer (rope_cos_sin): the same bits.
          std::vector<float> cos_sin(tokens * rot_dim);
          rope_cos_sin(pos.data(), tokens, inv_freq.data(), rot_dim / 2, cos_sin.data());
          auto q_cs = q0, k_cs = k0;
          std::vector<float> kc_cs(cache_floats, 0.5f), vc_cs = kc_cs;
          in.q = q_cs.data();
          in.k = k_cs.data();
          in.cos_sin = cos_sin.data();
          prepare_attention_inputs(in, layout, kc_cs.data(), vc_cs.data());
          EXPECT_EQ(q_cs, q_sep) << what << " cos_sin";
          EXPECT_EQ(k_cs, k_sep) << what << " cos_sin";
          EXPECT_EQ(bits16(kc_cs), bits16(kc_sep)) << what << " cos_sin";
          EXPECT_NE(q, q0) << what;       // it did rotate
          if (kv_dtype == DType::BF16) {  // the cache holds the rotated k, rounded
            const std::vector<uint16_t> kb = bits16(kc);
            const int64_t at = layout.row_offset(slots[0], 1);
            for (int d = 0; d < head_dim; ++d)
              EXPECT_EQ(kb[at + d], bf16_nearest_even(k[(0 * kv_heads + 1) * head_dim + d]))
                  << what;
          }
        }
      }
    }
  }
}

TEST(PrepareAttentionInputsChecks, BadInputsThrowNamingTheProblemBeforeWritingAnything) {
  // Each call differs from a valid one in one field; it must throw pagoda's
  // InternalError naming that field and leave q, k and the caches alone.
  using ::testing::HasSubstr;
  using ::testing::ThrowsMessage;
  const int head_dim = 8, heads = 1;
  const KVLayout layout{4, heads, head_dim};
  const std::vector<int32_t> pos = {3};
  const std::vector<int64_t> slots = {1};
  const auto inv_freq = hf_inv_freq(head_dim, 10000.0f);
  const std::vector<float> norm(head_dim, 1.0f), q0(head_dim, 0.25f), v(head_dim, 0.5f);
  const std::vector<float> cache0(int64_t{4} * heads * head_dim, -1.0f);
  auto q = q0, k = q0, k_cache = cache0, v_cache = cache0;
  auto valid = [&] {
    AttentionInputs in;
    in.q = q.data();
    in.k = k.data();
    in.v = v.data();
    in.num_tokens = 1;
    in.num_q_heads = heads;
    in.q_norm = norm.data();
    in.k_norm = norm.data();
    in.positions = pos.data();
    in.inv_freq = inv_freq.data();
    in.rot_dim = head_dim;
    in.slot_mapping = slots.data();
    return in;
  };
  const std::string rot = " must be even and within 0..head_dim 8";
  const std::string norms = "q_norm and k_norm must be given together";
  struct BadCall {
    std::string what;
    AttentionInputs in;
    std::string message;
  };
  std::vector<BadCall> bad_calls;
  for (int rot_dim : {5, 10, -2}) {
    bad_calls.push_back({"rot_dim", valid(), "rot_dim " + std::to_string(rot_dim) + rot});
    bad_calls.back().in.rot_dim = rot_dim;
  }
  bad_calls.push_back({"q_norm only", valid(), norms});
  bad_calls.back().in.k_norm = nullptr;
  bad_calls.push_back({"k_norm only", valid(), norms});
  bad_calls.back().in.q_norm = nullptr;
  for (const BadCall& call : bad_calls) {
    EXPECT_THAT([&] { prepare_attention_inputs(call.in, layout, k_cache.data(), v_cache.data()); },
                ThrowsMessage<InternalError>(HasSubstr(call.message)))
        << call.what;
    EXPECT_EQ(q, q0) << call.what;
    EXPECT_EQ(k, q0) << call.what;
    EXPECT_EQ(k_cache, cache0) << call.what;
    EXPECT_EQ(v_cache, cache0) << call.what;
  }
  // The valid call they are variants of goes through and stores the token.
  prepare_attention_inputs(valid(), layout, k_cache.data(), v_cache.data());
  EXPECT_NE(q, q0);
  EXPECT_NE(k_cache, cache0);
  EXPECT_NE(v_cache, cache0);
}

INSTANTIATE_TEST_SUITE_P(AllSupported, RopeEmbeddingKv, ::testing::ValuesIn(supported_isas()),
                         isa_test_name);

}  // namespace
}  // namespace pagoda::ops::testing
