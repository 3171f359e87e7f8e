// LLMEngine::add_request_with_context (what `bench latency --context-len`
// times): the context's blocks come from the KV-cache manager as a prefill
// would take them, its pages are read by the normal decode steps, and every
// misuse is refused before anything is held.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "core/error.h"
#include "engine/llm_engine.h"
#include "engine_test_util.h"

namespace pagoda {
namespace {

using test::greedy;

std::vector<int32_t> random_prompt(uint32_t seed, int n) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(3 + static_cast<int32_t>(rng() % 500));
  return t;
}

EngineOptions no_prefix_cache() {
  EngineOptions o;
  o.enable_prefix_caching = false;
  o.block_size = 16;
  return o;
}

int32_t used_blocks(const LLMEngine& e) { return e.num_kv_blocks() - e.num_free_kv_blocks(); }

TEST(ContextTakenAsComputed, DecodeStepsStartAtTheContextWithoutAPrefill) {
  LLMEngine engine(test::kDemoModel, no_prefix_cache());
  engine.add_request_with_context("c", random_prompt(1, 201), greedy(3), 200, /*seed=*/7);
  // 200 positions = 12.5 blocks of 16: 13 blocks held before any step.
  EXPECT_EQ(used_blocks(engine), 13);
  EXPECT_EQ(engine.kv_bytes_held("c"), engine.kv_cache().plan().bytes_per_sequence(200));
  int steps = 0;
  std::vector<int32_t> tokens;
  while (engine.has_unfinished()) {
    for (const RequestOutput& out : engine.step()) tokens = out.token_ids;
    // One token per step, at position 200 + step: never a prefill.
    ASSERT_EQ(engine.last_batch().num_tokens(), 1);
    EXPECT_EQ(engine.last_batch().positions[0], 200 + steps);
    EXPECT_EQ(engine.last_batch().seq_lens[0], 201 + steps);
    ++steps;
  }
  EXPECT_EQ(steps, 3);
  EXPECT_EQ(tokens.size(), 3u);
  EXPECT_EQ(engine.num_free_kv_blocks(), engine.num_kv_blocks());
}

// The first logits row after a context filled from `seed`.
std::vector<float> first_row(uint64_t seed) {
  LLMEngine engine(test::kDemoModel, no_prefix_cache());
  std::vector<float> row;
  engine.set_logits_observer([&](const std::string&, const float* logits, int64_t vocab) {
    if (row.empty()) row.assign(logits, logits + vocab);
  });
  engine.add_request_with_context("c", random_prompt(1, 101), greedy(1), 100, seed);
  while (engine.has_unfinished()) engine.step();
  return row;
}

// The filled pages are what the model attends to: the same seed gives the
// same logits, another seed other ones (a fill that wrote nothing, or pages
// the model did not read, would give equal rows).
TEST(ContextTakenAsComputed, TheModelReadsTheFilledPages) {
  const std::vector<float> a = first_row(1), b = first_row(1), c = first_row(2);
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  for (float v : a) ASSERT_TRUE(std::isfinite(v));
}

// A window-8 model on blocks of 4 (layers 1, 2, 4 sliding): the full
// group holds all 50 blocks of 200 positions, the sliding ones only their
// window, as after a real chunked prefill; then it decodes.
TEST(ContextTakenAsComputed, SlidingGroupsHoldOnlyTheirWindow) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("pagoda_ctx_swa_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(test::kDemoModel)) {
    if (e.is_regular_file())
      fs::copy_file(e.path(), dir / e.path().filename(), fs::copy_options::overwrite_existing);
  }
  std::ifstream in(dir / "config.json");
  auto cfg = nlohmann::json::parse(in);
  cfg["sliding_window"] = 8;
  cfg["layer_types"] = {"full_attention", "sliding_attention", "sliding_attention",
                        "full_attention", "sliding_attention"};
  std::ofstream(dir / "config.json") << cfg.dump();
  EngineOptions o = no_prefix_cache();
  o.block_size = 4;
  LLMEngine engine(dir.string(), o);
  const KVCachePlan& plan = engine.kv_cache().plan();
  bool has_sliding = false;
  for (const KVCacheGroup& g : plan.groups) has_sliding |= g.spec.sliding_window > 0;
  ASSERT_TRUE(has_sliding);
  engine.add_request_with_context("c", random_prompt(3, 201), greedy(4), 200, 1);
  // kv-plan's figure is the most a sequence holds at once: a sliding
  // group's window + 2 pages (one partly outside, one being written). At
  // rest, before the next token, it holds the window's 2 pages of 4.
  int64_t two_pages = 0;
  for (const KVCacheGroup& g : plan.groups) {
    if (g.spec.sliding_window > 0) {
      two_pages += 2 * plan.pools[g.pool].page_bytes * static_cast<int64_t>(g.tensors.size());
    }
  }
  EXPECT_EQ(engine.kv_bytes_held("c"), plan.bytes_per_sequence(200) - two_pages);
  // Every group holding all 50 blocks would be far more.
  int64_t all_blocks = 0;
  for (const KVCacheGroup& g : plan.groups) {
    all_blocks += 50 * plan.pools[g.pool].page_bytes * static_cast<int64_t>(g.tensors.size());
  }
  EXPECT_LT(engine.kv_bytes_held("c"), all_blocks * 3 / 4);
  int steps = 0;
  while (engine.has_unfinished()) {
    engine.step();
    ASSERT_EQ(engine.last_batch().num_tokens(), 1);
    ++steps;
  }
  EXPECT_EQ(steps, 4);
  EXPECT_EQ(engine.num_free_kv_blocks(), engine.num_kv_blocks());
  fs::remove_all(dir);
}

TEST(ContextTakenAsComputed, MisuseIsRefusedHoldingNothing) {
  {
    LLMEngine engine(test::kDemoModel, EngineOptions{});  // prefix caching on
    EXPECT_THROW(engine.add_request_with_context("c", random_prompt(1, 65), greedy(1), 64, 1),
                 InputError);
  }
  LLMEngine engine(test::kDemoModel, no_prefix_cache());
  const auto prompt = random_prompt(1, 65);
  EXPECT_THROW(engine.add_request_with_context("c", prompt, greedy(1), 65, 1), InputError);
  EXPECT_THROW(engine.add_request_with_context("c", prompt, greedy(1), 0, 1), InputError);
  SamplingParams scoring = greedy(1);
  scoring.prompt_logprobs = 0;
  EXPECT_THROW(engine.add_request_with_context("c", prompt, scoring, 64, 1), InputError);
  EXPECT_EQ(engine.num_free_kv_blocks(), engine.num_kv_blocks());
  EXPECT_FALSE(engine.has_unfinished());

  // A pool of 40 blocks (the least the demo's 512 positions need is 32)
  // cannot hold two contexts of 400: the second is refused, its blocks given
  // back, the first still runs.
  EngineOptions small = no_prefix_cache();
  const int64_t block_bytes = 2 * 5 * 16 * 32 * 4;  // K and V, 5 layers, 16 x (4 x 8) f32
  small.kv_cache_memory = 40 * block_bytes;
  small.kv_cache_dtype = KVCacheDType::F32;
  LLMEngine tiny(test::kDemoModel, small);
  ASSERT_EQ(tiny.num_kv_blocks(), 40);
  tiny.add_request_with_context("a", random_prompt(1, 401), greedy(1), 400, 1);
  const int32_t held = used_blocks(tiny);
  EXPECT_THROW(tiny.add_request_with_context("b", random_prompt(2, 401), greedy(1), 400, 1),
               InputError);
  EXPECT_EQ(used_blocks(tiny), held);
  while (tiny.has_unfinished()) tiny.step();
  EXPECT_EQ(tiny.num_free_kv_blocks(), tiny.num_kv_blocks());
}

}  // namespace
}  // namespace pagoda
