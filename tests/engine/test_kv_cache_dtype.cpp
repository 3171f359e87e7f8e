// --kv-cache-dtype: auto follows the checkpoint's weights, a bf16 cache
// holds twice the blocks of an f32 one in the same memory, and greedy
// outputs with a bf16 cache still do not depend on batch composition (and
// stay close to the f32 cache's).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/llm.h"
#include "engine_test_util.h"

namespace pagoda {
namespace {

using test::greedy;

const std::string kBf16Model = PAGODA_TEST_DATA_DIR "/stories260k-bf16";

const std::vector<std::string> kPrompts = {
    "Once upon a time",       "Lily and Tom went to the park",
    "The little dog",         "One day, a big bird",
    "Sam had a red ball",     "The sun was hot and",
    "There was a tiny mouse", "Mom said"};

EngineOptions with_kv(KVCacheDType d) {
  EngineOptions o;
  o.kv_cache_dtype = d;
  return o;
}

TEST(KvCacheDtype, ParsesTheFourChoicesAndRefusesOthers) {
  EXPECT_EQ(parse_kv_cache_dtype("auto"), KVCacheDType::Auto);
  EXPECT_EQ(parse_kv_cache_dtype("bf16"), KVCacheDType::BF16);
  EXPECT_EQ(parse_kv_cache_dtype("f32"), KVCacheDType::F32);
  EXPECT_EQ(parse_kv_cache_dtype("fp8"), KVCacheDType::Fp8);
  EXPECT_THROW(parse_kv_cache_dtype("fp16"), InputError);
  EXPECT_THROW(parse_kv_cache_dtype("BF16 "), InputError);
}

TEST(KvCacheDtype, Fp8IsRefusedForModelsWithoutAnFp8Format) {
  // The Llama family has no fp8 K/V format: a clear refusal at start-up.
  try {
    LLM llm(test::kDemoModel, with_kv(KVCacheDType::Fp8));
    FAIL() << "an fp8 cache was accepted for a Llama model";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("--kv-cache-dtype fp8 is not supported"));
  }
}

TEST(KvCacheDtype, AutoFollowsTheCheckpointsWeights) {
  // stories260k stores f32 weights (its goldens stay exact with an f32
  // cache), stories260k-bf16 the same weights in bf16.
  EXPECT_EQ(LLM(test::kDemoModel).engine().kv_cache_dtype(), DType::F32);
  EXPECT_EQ(LLM(kBf16Model).engine().kv_cache_dtype(), DType::BF16);
  EXPECT_EQ(LLM(test::kDemoModel, with_kv(KVCacheDType::BF16)).engine().kv_cache_dtype(),
            DType::BF16);
  EXPECT_EQ(LLM(kBf16Model, with_kv(KVCacheDType::F32)).engine().kv_cache_dtype(), DType::F32);
  // Quantized from bf16 still counts as bf16 (the checkpoint's dtype).
  EngineOptions q8;
  q8.quantization = Quantization::Int8;
  EXPECT_EQ(LLM(kBf16Model, q8).engine().kv_cache_dtype(), DType::BF16);
  EXPECT_EQ(resolve_kv_cache_dtype(KVCacheDType::Auto, DType::F16), DType::F32);
}

TEST(KvCacheDtype, Bf16HoldsTwiceTheBlocksInTheSameMemory) {
  // stories260k: 5 layers x (K, V) x 4 kv heads x head_dim 8 per token.
  const int64_t f32_block_bytes = 5 * 2 * 4 * 8 * 4 * 16;
  EngineOptions o;
  o.kv_cache_memory = 100 * f32_block_bytes;
  o.kv_cache_dtype = KVCacheDType::F32;
  LLM f32(test::kDemoModel, o);
  o.kv_cache_dtype = KVCacheDType::BF16;
  LLM bf16(test::kDemoModel, o);
  EXPECT_EQ(f32.engine().num_kv_blocks(), 100);
  EXPECT_EQ(bf16.engine().num_kv_blocks(), 200);
  EXPECT_EQ(f32.engine().kv_cache_bytes(), bf16.engine().kv_cache_bytes());
}

TEST(KvCacheDtype, Bf16CacheBatchedEqualsAlone) {
  // Each query's attention over a bf16 cache does not depend on its tile,
  // so a prompt decoded in a batch of eight (prefills and decodes mixed,
  // some in chunks) gives the tokens it gives alone; on the bf16 checkpoint
  // (auto) and with the f32 one forced to a bf16 cache.
  for (const std::string& model : {kBf16Model, test::kDemoModel}) {
    SCOPED_TRACE(model);
    EngineOptions o = with_kv(KVCacheDType::BF16);
    o.max_num_batched_tokens = 24;
    LLM llm(model, o);
    ASSERT_EQ(llm.engine().kv_cache_dtype(), DType::BF16);
    const auto batched = llm.generate(kPrompts, greedy(40));
    for (size_t i = 0; i < kPrompts.size(); ++i) {
      const auto alone = llm.generate({kPrompts[i]}, greedy(40));
      EXPECT_EQ(batched[i].token_ids, alone[0].token_ids) << kPrompts[i];
    }
  }
}

TEST(KvCacheDtype, Bf16CacheGreedyTextMostlyAgreesWithF32) {
  // Rounding K/V to bf16 moves logits a little; greedy text mostly keeps.
  // Tokens of each 32-token continuation equal to the f32-cache run's
  // before the first difference (printed); asserted loosely.
  constexpr int kTokens = 32;
  const auto f32 = LLM(test::kDemoModel).generate(kPrompts, greedy(kTokens));
  const auto bf16 =
      LLM(test::kDemoModel, with_kv(KVCacheDType::BF16)).generate(kPrompts, greedy(kTokens));
  int identical = 0, total_prefix = 0;
  for (size_t i = 0; i < f32.size(); ++i) {
    ASSERT_EQ(bf16[i].token_ids.size(), static_cast<size_t>(kTokens));
    int prefix = 0;
    while (prefix < kTokens && f32[i].token_ids[prefix] == bf16[i].token_ids[prefix]) ++prefix;
    total_prefix += prefix;
    identical += prefix == kTokens;
  }
  const double mean = static_cast<double>(total_prefix) / static_cast<double>(f32.size());
  std::printf("bf16 vs f32 KV cache: %d of %zu identical, mean common prefix %.1f\n", identical,
              f32.size(), mean);
  EXPECT_GE(mean, 20.0);
  EXPECT_GE(identical, 4);
}

}  // namespace
}  // namespace pagoda
