// Load-time repacking of bf16 weights into GEMM panels (ops/packed.h): the
// repacked model computes what the in-place one does (up to bf16 rounding
// of activations), and the panels replace the checkpoint pages in memory.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "checkpoint_test_util.h"
#include "forward_test_util.h"
#include "models/model.h"
#include "models/quantize.h"
#include "ops/packed.h"

namespace pagoda {
namespace {

using test::TempDir;
using test::tiny_checkpoint;

TEST(RepackedModel, LogitsMatchTheInPlaceModel) {
  TempDir tmp;
  const std::string dir = tiny_checkpoint(tmp, "--arch qwen3 --dtype bf16 --tied --seed 7");
  auto in_place = load_model(dir, parallel::single_process(), {Quantization::None, false});
  auto packed = load_model(dir);
  // Owned bytes beyond the f32 copies of norms both models make: every
  // linear layer and the (tied) LM head as a packed copy, or nothing where
  // the CPU has no native kernel (then the mapping is used in place); the
  // copies are 64-byte aligned, a few bytes over each.
  const auto extra = static_cast<int64_t>(packed->owned_weight_bytes()) -
                     static_cast<int64_t>(in_place->owned_weight_bytes());
  if (ops::packed_bf16_is_native()) {
    const int64_t panels = packed->weight_bytes_per_step();
    EXPECT_GE(extra, panels);
    EXPECT_LT(extra, panels + panels / 100);
  } else {
    EXPECT_EQ(extra, 0);
  }
  // Another f32 summation order can flip the bf16 rounding of an activation
  // (2^-8 relative): the bf16 limit of tools/compare_logits.py.
  const double err = test::worst_logit_error(*in_place, *packed);
  std::printf("repacked vs in place: worst relative error %.2e\n", err);
  EXPECT_LE(err, 5e-3);
}

TEST(RepackedModel, Int8PanelsGiveTheSameLogitsBitForBit) {
  // Packed int8 weights compute the same exact integer dots as row-major
  // ones: the logits are identical, not merely close.
  TempDir tmp;
  const std::string dir = tiny_checkpoint(tmp, "--arch qwen3 --dtype bf16 --tied --seed 9");
  auto in_place = load_model(dir, parallel::single_process(), {Quantization::Int8, false});
  auto packed = load_model(dir, parallel::single_process(), {Quantization::Int8, true});
  EXPECT_EQ(packed->repacked_weights(), ops::packed_i8_is_native());
  EXPECT_EQ(test::worst_logit_error(*in_place, *packed), 0.0);
}

TEST(RepackedModel, OnlyThePanelsStayResident) {
  // An untied bf16 model: after repacking, the checkpoint pages of every
  // linear layer and the LM head are dropped; what stays mapped is the
  // embedding rows read and the norms. (Without a native kernel nothing is
  // packed and load touches no weight page either.)
  TempDir tmp;
  const std::string dir = tiny_checkpoint(
      tmp, "--arch llama --dtype bf16 --hidden 256 --intermediate 512 --layers 2 --seed 8");
  auto model = load_model(dir);
  const int64_t linear_bytes = model->weight_bytes_per_step();
  const int64_t resident = resident_checkpoint_bytes();
  EXPECT_LT(resident, linear_bytes / 4) << "resident " << resident << " linear " << linear_bytes;
}

TEST(RepackedModel, ATiedHeadIsAlsoTheEmbeddingTable) {
  // A tied bf16 model: the packed LM head holds the embedding's values, so
  // lookups read the panels and the checkpoint's embedding pages are dropped
  // rather than kept (and faulted back in by the lookups) as a second copy.
  // The logits match the in-place model's (LogitsMatchTheInPlaceModel).
  // (Without a native kernel nothing is packed and the table is read in place.)
  TempDir tmp;
  const std::string dir = tiny_checkpoint(
      tmp, "--arch qwen3 --dtype bf16 --tied --hidden 256 --intermediate 512 --layers 2 --seed 6");
  auto model = load_model(dir);
  ASSERT_EQ(model->repacked_weights(), ops::packed_bf16_is_native());
  if (!model->repacked_weights()) return;
  // Lookups of tokens spread over the vocabulary map no checkpoint page.
  const int64_t after_load = resident_checkpoint_bytes();
  std::vector<int32_t> prompt;
  for (int32_t t = 1; t < 60; ++t) prompt.push_back(t * 8 % model->config().vocab_size);
  test::prefill_and_decode(*model, prompt, 511);
  EXPECT_EQ(resident_checkpoint_bytes(), after_load);
}

}  // namespace
}  // namespace pagoda
