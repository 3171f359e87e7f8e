// The serving core under pressure: prefix caching, chunked prefill
// scheduling, preemption with a tiny pool, aborts and sliding-window KV
// bounds. Every completed greedy output must equal the request run alone.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "core/error.h"
#include "engine/llm_engine.h"
#include "engine_test_util.h"

namespace pagoda {
namespace {

const std::string kModel = test::kDemoModel;
using test::greedy;

// Runs the engine until every request finishes; returns id -> final output.
std::map<std::string, RequestOutput> drain(LLMEngine& engine) {
  std::map<std::string, RequestOutput> done;
  while (engine.has_unfinished()) {
    for (RequestOutput& o : engine.step()) {
      if (o.finished) done[o.request_id] = std::move(o);
    }
  }
  for (RequestOutput& o : engine.step()) done[o.request_id] = std::move(o);  // late aborts
  return done;
}

std::vector<int32_t> solo(const std::vector<int32_t>& prompt, int max_tokens,
                          const std::string& model_dir = kModel) {
  EngineOptions o;
  o.enable_prefix_caching = false;
  LLMEngine engine(model_dir, o);
  engine.add_request("solo", prompt, greedy(max_tokens));
  return drain(engine).at("solo").token_ids;
}

std::vector<int32_t> random_tokens(std::mt19937& rng, int n) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(3 + static_cast<int32_t>(rng() % 500));
  return t;
}

TEST(PrefixCache, SharedPrefixIsSkippedAndOutputUnchanged) {
  EngineOptions o;
  o.block_size = 4;
  LLMEngine engine(kModel, o);
  std::mt19937 rng(1);
  const auto prefix = random_tokens(rng, 12);  // 3 full blocks
  auto a = prefix, b = prefix;
  a.insert(a.end(), {40, 41, 42});
  b.insert(b.end(), {50, 51});
  engine.add_request("a", a, greedy(10));
  const auto out_a = drain(engine).at("a");
  EXPECT_EQ(out_a.metrics.num_cached_tokens, 0);

  engine.add_request("b", b, greedy(10));
  const auto batch_b = engine.step();  // first step: prefill of b
  // Only the 2 uncached tokens were computed.
  EXPECT_EQ(engine.last_batch().token_ids, (std::vector<int32_t>{50, 51}));
  const auto out_b = drain(engine).at("b");
  EXPECT_EQ(out_b.metrics.num_cached_tokens, 12);
  EXPECT_EQ(out_b.token_ids, solo(b, 10));
  EXPECT_EQ(out_a.token_ids, solo(a, 10));

  // Same tokens after a different first block: no hit at all.
  auto c = b;
  c[0] = c[0] == 7 ? 8 : 7;
  engine.add_request("c", c, greedy(4));
  EXPECT_EQ(drain(engine).at("c").metrics.num_cached_tokens, 0);
  // A fully cached prompt still computes its last token.
  engine.add_request("a2", a, greedy(10));
  const auto out_a2 = drain(engine).at("a2");
  EXPECT_EQ(out_a2.metrics.num_cached_tokens, 12);
  EXPECT_EQ(out_a2.token_ids, out_a.token_ids);
  EXPECT_GT(engine.stats().prefix_cache_hit_rate(), 0.0);
  EXPECT_EQ(engine.num_free_kv_blocks(), engine.num_kv_blocks());
}

TEST(PrefixCache, CanBeTurnedOff) {
  EngineOptions o;
  o.block_size = 4;
  o.enable_prefix_caching = false;
  LLMEngine engine(kModel, o);
  const std::vector<int32_t> p = {5, 6, 7, 8, 9, 10, 11, 12, 13};
  engine.add_request("a", p, greedy(3));
  drain(engine);
  engine.add_request("b", p, greedy(3));
  EXPECT_EQ(drain(engine).at("b").metrics.num_cached_tokens, 0);
}

TEST(Scheduler, ChunkedPrefillKeepsDecodesRunning) {
  EngineOptions o;
  o.max_num_batched_tokens = 8;
  LLMEngine engine(kModel, o);
  std::mt19937 rng(2);
  engine.add_request("short", random_tokens(rng, 4), greedy(30));
  engine.step();  // prefill of "short"
  const auto long_prompt = random_tokens(rng, 60);
  engine.add_request("long", long_prompt, greedy(5));
  // While the long prompt is prefilled in chunks of at most 7 tokens, the
  // running request decodes one token in every step.
  int chunks = 0;
  for (int step = 0; step < 9; ++step) {
    const auto outs = engine.step();
    const BatchMetadata& b = engine.last_batch();
    ASSERT_LE(b.num_tokens(), 8);
    ASSERT_EQ(b.num_seqs(), 2) << "step " << step;
    EXPECT_EQ(b.query_start_loc[1] - b.query_start_loc[0], 1);  // the decode
    chunks += b.query_start_loc[2] - b.query_start_loc[1];
    bool short_progressed = false;
    for (const auto& out : outs)
      short_progressed |= out.request_id == "short" && out.new_token_ids.size() == 1;
    EXPECT_TRUE(short_progressed) << "decode stalled at step " << step;
    if (chunks >= 60) break;
  }
  EXPECT_EQ(chunks, 60);
  const auto done = drain(engine);
  EXPECT_EQ(done.at("long").token_ids, solo(long_prompt, 5));
}

// Requests arrive over time with shared and unshared prefixes, some are
// aborted, and a pool of 48 blocks of 4 tokens (~3 long sequences) forces
// preemption. `kv_slots` = layers per KV group slot of the model (the
// demo model has 5 layers in one group).
void randomized_stress(const std::string& model_dir, int kv_slots, int num_requests) {
  std::mt19937 rng(3);
  EngineOptions o;
  o.block_size = 4;
  o.max_num_batched_tokens = 64;
  o.max_num_seqs = 24;
  o.max_model_len = 128;
  o.kv_cache_memory = kv_slots * 2 * 4 * 8 * 4 * 4 * 48;
  LLMEngine engine(model_dir, o);
  const auto system_prompt = random_tokens(rng, 20);

  struct Spec {
    std::vector<int32_t> prompt;
    int max_tokens;
    int abort_at_step;  // -1: never
  };
  std::map<std::string, Spec> specs;
  for (int i = 0; i < num_requests; ++i) {
    Spec s;
    if (rng() % 2) s.prompt = system_prompt;  // shared prefix
    const auto tail = random_tokens(rng, 1 + static_cast<int>(rng() % 40));
    s.prompt.insert(s.prompt.end(), tail.begin(), tail.end());
    s.max_tokens = 1 + static_cast<int>(rng() % 40);
    s.abort_at_step = rng() % 10 == 0 ? static_cast<int>(rng() % 200) : -1;
    specs["r" + std::to_string(i)] = s;
  }
  // Requests arrive over time; some are aborted mid-way.
  std::map<std::string, RequestOutput> finished;
  std::set<std::string> aborted;
  auto it = specs.begin();
  int64_t preemptions = 0;
  for (int step = 0; it != specs.end() || engine.has_unfinished(); ++step) {
    for (int k = 0; k < 3 && it != specs.end(); ++k, ++it)
      engine.add_request(it->first, it->second.prompt, greedy(it->second.max_tokens));
    for (const auto& [id, s] : specs) {
      if (s.abort_at_step == step && engine.abort_request(id)) aborted.insert(id);
    }
    for (RequestOutput& out : engine.step()) {
      if (out.finished) {
        preemptions += out.metrics.num_preemptions;
        finished[out.request_id] = std::move(out);
      }
    }
    engine.kv_cache().check_invariants();
    ASSERT_LT(step, 20000) << "engine stopped making progress";
  }
  EXPECT_EQ(finished.size(), specs.size());
  EXPECT_GT(preemptions, num_requests / 20);
  EXPECT_GT(aborted.size(), static_cast<size_t>(num_requests / 40));
  EXPECT_GT(engine.stats().prefix_cache_hit_tokens, 0);
  for (const auto& [id, out] : finished) {
    if (aborted.count(id)) {
      EXPECT_EQ(out.finish_reason, FinishReason::Abort) << id;
      continue;
    }
    EXPECT_EQ(out.finish_reason, FinishReason::Length) << id;
    EXPECT_EQ(out.token_ids, solo(specs[id].prompt, specs[id].max_tokens, model_dir)) << id;
  }
  EXPECT_EQ(engine.num_kv_blocks(), 48);
  EXPECT_EQ(engine.num_free_kv_blocks(), engine.num_kv_blocks());
  for (int32_t b = 0; b < engine.num_kv_blocks(); ++b)
    ASSERT_EQ(engine.kv_cache().pools()[0].ref_count(b), 0);
}

TEST(Scheduler, RandomizedStressWithPreemptionAndAborts) { randomized_stress(kModel, 5, 200); }

TEST(Scheduler, BlockSizeOneAndJustEnoughPool) {
  EngineOptions o;
  o.block_size = 1;
  o.max_model_len = 40;
  o.kv_cache_memory = 5 * 2 * 4 * 8 * 4 * 40;  // exactly one 40-token sequence
  LLMEngine engine(kModel, o);
  std::mt19937 rng(4);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i) {
    prompts.push_back(random_tokens(rng, 5 + i));
    engine.add_request("q" + std::to_string(i), prompts.back(), greedy(30));
  }
  const auto done = drain(engine);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(done.at("q" + std::to_string(i)).token_ids, solo(prompts[i], 30)) << i;
  }
  EXPECT_EQ(engine.num_free_kv_blocks(), engine.num_kv_blocks());
}

SamplingParams with_priority(SamplingParams p, int priority) {
  p.priority = priority;
  return p;
}

TEST(Priority, LowerValuesAreAdmittedFirst) {
  EngineOptions o;
  o.max_num_seqs = 1;  // one request at a time: the finish order is the admission order
  o.scheduling_policy = SchedulingPolicy::Priority;
  LLMEngine engine(kModel, o);
  std::mt19937 rng(5);
  const auto prompt = random_tokens(rng, 6);
  engine.add_request("first-low", prompt, with_priority(greedy(3), 5));
  engine.add_request("urgent", prompt, with_priority(greedy(3), -2));
  engine.add_request("normal-a", prompt, with_priority(greedy(3), 0));
  engine.add_request("normal-b", prompt, with_priority(greedy(3), 0));
  std::vector<std::string> order;
  while (engine.has_unfinished()) {
    for (const RequestOutput& out : engine.step())
      if (out.finished) order.push_back(out.request_id);
  }
  EXPECT_EQ(order, (std::vector<std::string>{"urgent", "normal-a", "normal-b", "first-low"}));
}

// Two requests that cannot both fit the pool: the victim of preemption is the
// newest under FCFS, the lowest priority (here the older one) under priority.
std::map<std::string, RequestOutput> run_two_that_do_not_fit(SchedulingPolicy policy) {
  EngineOptions o;
  o.block_size = 4;
  o.max_model_len = 40;
  o.kv_cache_memory = 5 * 2 * 4 * 8 * 4 * 4 * 10;  // 10 blocks; each request needs 8
  o.scheduling_policy = policy;
  LLMEngine engine(kModel, o);
  std::mt19937 rng(6);
  const bool by_priority = policy == SchedulingPolicy::Priority;
  engine.add_request("bulk", random_tokens(rng, 8),
                     with_priority(greedy(24), by_priority ? 10 : 0));
  engine.step();
  engine.add_request("vip", random_tokens(rng, 8), greedy(24));
  return drain(engine);
}

TEST(Priority, PreemptsTheLowestPriorityNotTheNewest) {
  const auto fcfs = run_two_that_do_not_fit(SchedulingPolicy::Fcfs);
  EXPECT_EQ(fcfs.at("bulk").metrics.num_preemptions, 0);
  EXPECT_GT(fcfs.at("vip").metrics.num_preemptions, 0);

  const auto prio = run_two_that_do_not_fit(SchedulingPolicy::Priority);
  EXPECT_GT(prio.at("bulk").metrics.num_preemptions, 0);
  EXPECT_EQ(prio.at("vip").metrics.num_preemptions, 0);
  // Preemption and recompute leave greedy outputs unchanged.
  for (const char* id : {"bulk", "vip"}) {
    EXPECT_EQ(prio.at(id).token_ids, fcfs.at(id).token_ids) << id;
    EXPECT_EQ(prio.at(id).finish_reason, FinishReason::Length) << id;
  }
}

TEST(Priority, RefusedUnderFcfs) {
  LLMEngine engine(kModel, EngineOptions{});
  EXPECT_THROW(engine.add_request("p", {5, 6, 7}, with_priority(greedy(2), 1)), InputError);
  EXPECT_FALSE(engine.has_unfinished());
}

}  // namespace
}  // namespace pagoda

namespace pagoda {
namespace {

// The demo model with a sliding window on some layers (layer_types).
std::string sliding_window_copy(const std::string& name, int window, bool all_layers) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(kModel)) {
    if (e.is_regular_file())
      fs::copy_file(e.path(), dir / e.path().filename(), fs::copy_options::overwrite_existing);
  }
  std::ifstream in(dir / "config.json");
  auto cfg = nlohmann::json::parse(in);
  cfg["sliding_window"] = window;
  if (!all_layers) {
    cfg["layer_types"] = {"full_attention", "sliding_attention", "sliding_attention",
                          "full_attention", "sliding_attention"};
  }
  std::ofstream(dir / "config.json") << cfg.dump();
  return dir.string();
}

TEST(SlidingWindow, KvUsageStaysBoundedAsTheSequenceGrows) {
  const std::string dir = sliding_window_copy("pagoda_swa", 16, /*all_layers=*/true);
  EngineOptions o;
  o.block_size = 4;
  LLMEngine engine(dir, o);
  engine.add_request("long", {1, 403, 407, 261, 378}, greedy(400));
  int32_t max_used = 0;
  while (engine.has_unfinished()) {
    engine.step();
    max_used = std::max(max_used, engine.num_kv_blocks() - engine.num_free_kv_blocks());
  }
  // Window 16 = 4 blocks, + a partial one, + the block being written.
  EXPECT_LE(max_used, 6);
  EXPECT_EQ(engine.num_free_kv_blocks(), engine.num_kv_blocks());
  std::filesystem::remove_all(dir);
}

TEST(SlidingWindow, MixedLayerGroupsShareOnePool) {
  const std::string dir = sliding_window_copy("pagoda_mixed", 8, /*all_layers=*/false);
  EngineOptions o;
  o.block_size = 4;
  LLMEngine engine(dir, o);
  // Full layers 0, 3 (K and V: 4 tensors) and sliding layers 1, 2, 4 (6)
  // in one pool of 4 slots (kv/kv_cache_plan.h: one tensor count per
  // pool): the full group, and the sliding kind split 4 + 2.
  ASSERT_EQ(engine.kv_cache().groups().size(), 3u);
  ASSERT_EQ(engine.kv_cache().plan().pools.size(), 1u);
  EXPECT_EQ(engine.kv_cache().plan().pools[0].num_slots, 4);
  std::mt19937 rng(5);
  const auto prompt = random_tokens(rng, 30);
  engine.add_request("a", prompt, greedy(100));
  int32_t max_used = 0;
  std::vector<int32_t> tokens;
  while (engine.has_unfinished()) {
    for (const auto& out : engine.step()) tokens = out.token_ids;
    max_used = std::max(max_used, engine.num_kv_blocks() - engine.num_free_kv_blocks());
  }
  // Full group: 130 tokens = 33 blocks; each sliding group: at most 2 + 2.
  EXPECT_LE(max_used, 33 + 2 * 4);
  EXPECT_EQ(tokens.size(), 100u);
  std::filesystem::remove_all(dir);
}

TEST(SlidingWindow, RandomizedStressOnAMixedModel) {
  // Full layers 0 and 3 and window-8 layers 1, 2, 4: groups of 4 tensors
  // (K and V of 2 layers; the sliding kind splits 4 + 2), 4 slots per
  // block (kv_slots counts layers of K and V).
  const std::string dir = sliding_window_copy("pagoda_swa_stress", 8, /*all_layers=*/false);
  randomized_stress(dir, 2, 80);
  std::filesystem::remove_all(dir);
}

// Greedy outputs of `prompts` run one after another on one engine (so later
// ones can hit what earlier ones cached), with their cached-token counts.
std::vector<RequestOutput> run_in_turn(const std::string& dir, bool prefix_caching,
                                       const std::vector<std::vector<int32_t>>& prompts) {
  EngineOptions o;
  o.block_size = 4;
  o.enable_prefix_caching = prefix_caching;
  LLMEngine engine(dir, o);
  std::vector<RequestOutput> outs;
  for (const auto& prompt : prompts) {
    engine.add_request("r", prompt, greedy(40));
    outs.push_back(drain(engine).at("r"));
  }
  EXPECT_EQ(engine.num_free_kv_blocks(), engine.num_kv_blocks());
  return outs;
}

TEST(SlidingWindow, PrefixCacheHitsGiveTheSameOutput) {
  for (const bool all_layers : {false, true}) {
    const std::string dir = sliding_window_copy("pagoda_swa_apc", 8, all_layers);
    std::mt19937 rng(9);
    const auto a = random_tokens(rng, 30);
    auto b = std::vector<int32_t>(a.begin(), a.begin() + 26);  // 6 full blocks shared
    b.insert(b.end(), {40, 41, 42, 43, 44});
    const auto c = a;  // 7 full blocks before the last token
    const auto cached = run_in_turn(dir, true, {a, b, c});
    const auto plain = run_in_turn(dir, false, {a, b, c});
    EXPECT_EQ(cached[0].metrics.num_cached_tokens, 0);
    EXPECT_EQ(cached[1].metrics.num_cached_tokens, 24) << all_layers;
    EXPECT_EQ(cached[2].metrics.num_cached_tokens, 28) << all_layers;
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(plain[i].metrics.num_cached_tokens, 0);
      EXPECT_EQ(cached[i].token_ids, plain[i].token_ids) << all_layers << " " << i;
    }
    std::filesystem::remove_all(dir);
  }
}

}  // namespace
}  // namespace pagoda
