// The engine on its own thread: many submitting threads, streamed outputs
// equal to offline greedy results, aborts that free blocks, shutdown.
#include <gtest/gtest.h>

#include <thread>

#include "core/error.h"
#include "engine/async_engine.h"
#include "engine/llm.h"
#include "engine_test_util.h"

namespace pagoda {
namespace {

using namespace std::chrono_literals;
const std::string kModel = test::kDemoModel;
using test::greedy;

// Pulls a stream to its end; returns the final output and the concatenated deltas.
std::pair<RequestOutput, std::string> collect(AsyncEngine::Stream& s) {
  std::string text;
  for (;;) {
    auto out = s.next(10s);
    if (!out) ADD_FAILURE() << "stream stalled";
    if (!out) return {};
    text += out->new_text;
    if (out->finished) return {*out, text};
  }
}

TEST(AsyncEngine, ConcurrentClientsGetTheirOfflineResults) {
  const std::vector<std::string> prompts = {
      "Once upon a time", "The little dog", "Lily and Tom", "One day",
      "The sun",          "A big red ball", "Sam",          "Mom said"};
  LLM offline(kModel);
  const auto expected = offline.generate(prompts, greedy(40));

  AsyncEngine engine(kModel, {});
  std::vector<std::thread> clients;
  std::vector<RequestOutput> got(prompts.size());
  std::vector<std::string> streamed(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    clients.emplace_back([&, i] {
      auto stream =
          engine.submit("c" + std::to_string(i), engine.tokenizer().encode(prompts[i]), greedy(40));
      std::tie(got[i], streamed[i]) = collect(*stream);
    });
  }
  for (auto& t : clients) t.join();
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(got[i].token_ids, expected[i].token_ids) << prompts[i];
    EXPECT_EQ(streamed[i], expected[i].text) << prompts[i];
    EXPECT_EQ(got[i].finish_reason, FinishReason::Length);
  }
  const EngineStats s = engine.stats();
  EXPECT_EQ(s.num_running, 0u);
  EXPECT_EQ(s.kv_blocks_free, s.kv_blocks_total);
}

TEST(AsyncEngine, AbortEndsTheStreamAndFreesBlocks) {
  AsyncEngine engine(kModel, {});
  auto stream = engine.submit("long", engine.tokenizer().encode("Once upon a time"), greedy(400));
  ASSERT_TRUE(stream->next(10s));  // generation has started
  engine.abort("long");
  auto [last, text] = collect(*stream);
  EXPECT_EQ(last.finish_reason, FinishReason::Abort);
  EXPECT_LT(last.token_ids.size(), 400u);
  for (int i = 0; i < 100 && engine.stats().kv_blocks_free != engine.stats().kv_blocks_total; ++i) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(engine.stats().kv_blocks_free, engine.stats().kv_blocks_total);
  EXPECT_EQ(engine.num_unfinished(), 0u);
}

TEST(AsyncEngine, BadRequestsFailInTheCallerAndHarmNothing) {
  AsyncEngine engine(kModel, {});
  EXPECT_THROW(engine.submit("bad", {}, greedy(4)), InputError);
  EXPECT_THROW(engine.submit("bad", {1, 100000}, greedy(4)), InputError);
  SamplingParams p = greedy(4);
  p.temperature = -1;
  EXPECT_THROW(engine.submit("bad", {1, 2}, p), InputError);
  // Long enough to still be live at the duplicate submit (the demo model
  // makes 4 tokens in well under a millisecond).
  auto ok = engine.submit("ok", {1, 403}, greedy(400));
  EXPECT_THROW(engine.submit("ok", {1, 403}, greedy(4)), InputError);  // duplicate live id
  EXPECT_EQ(collect(*ok).first.token_ids.size(), 400u);
}

TEST(AsyncEngine, ShutdownFinishesOrAbortsInFlightWork) {
  auto engine = std::make_unique<AsyncEngine>(kModel, EngineOptions{});
  auto quick = engine->submit("quick", {1, 403}, greedy(3));
  auto slow = engine->submit("slow", {1, 403}, greedy(500));
  engine->shutdown(3s);  // long enough for "quick" even on a loaded machine
  EXPECT_THROW(engine->submit("late", {1, 403}, greedy(3)), InputError);
  EXPECT_EQ(collect(*quick).first.finish_reason, FinishReason::Length);
  const auto last = collect(*slow).first;
  EXPECT_TRUE(last.finish_reason == FinishReason::Abort || last.token_ids.size() == 500u);
  engine.reset();
}

}  // namespace
}  // namespace pagoda
