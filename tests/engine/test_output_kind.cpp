// SamplingParams::output_kind (vLLM's RequestOutputKind): the same request
// run with Cumulative, Delta and FinalOnly outputs. Delta outputs, joined,
// must give the cumulative run's final ids, text and logprobs (and carry the
// prompt once); FinalOnly must give exactly one output, the cumulative final
// one.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/llm_engine.h"
#include "engine_test_util.h"

namespace pagoda {
namespace {

// Every output of one request, in order.
std::vector<RequestOutput> run(RequestOutputKind kind, const std::vector<int32_t>& prompt,
                               SamplingParams params) {
  EngineOptions o;
  LLMEngine engine(test::kDemoModel, o);
  params.output_kind = kind;
  engine.add_request("r", prompt, params);
  std::vector<RequestOutput> outs;
  while (engine.has_unfinished()) {
    for (RequestOutput& out : engine.step()) outs.push_back(std::move(out));
  }
  return outs;
}

bool same_logprobs(const std::vector<SampledToken>& a, const std::vector<SampledToken>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].token != b[i].token || a[i].logprob != b[i].logprob) return false;
  }
  return true;
}

TEST(OutputKind, DeltaJoinsToTheCumulativeOutputAndFinalOnlyIsItsLastOne) {
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378, 10, 411, 13};
  // Greedy with logprobs, and a stop string so text is held back at times
  // (a stop string no output contains: every token is still generated).
  SamplingParams p = test::greedy(24);
  p.logprobs = 2;
  p.stop = {"zq#never"};
  const auto cumulative = run(RequestOutputKind::Cumulative, prompt, p);
  const auto delta = run(RequestOutputKind::Delta, prompt, p);
  const auto final_only = run(RequestOutputKind::FinalOnly, prompt, p);
  ASSERT_FALSE(cumulative.empty());
  const RequestOutput& want = cumulative.back();
  ASSERT_TRUE(want.finished);
  ASSERT_EQ(want.token_ids.size(), 24u);

  ASSERT_EQ(delta.size(), cumulative.size());
  std::vector<int32_t> ids;
  std::string text;
  std::vector<SampledToken> logprobs;
  for (size_t i = 0; i < delta.size(); ++i) {
    const RequestOutput& d = delta[i];
    EXPECT_EQ(d.token_ids, d.new_token_ids) << i;
    EXPECT_EQ(d.text, d.new_text) << i;
    EXPECT_EQ(d.new_token_ids, cumulative[i].new_token_ids) << i;
    EXPECT_EQ(d.new_text, cumulative[i].new_text) << i;
    EXPECT_EQ(d.logprobs.size(), d.new_token_ids.size()) << i;
    // The prompt rides on the first output only.
    EXPECT_EQ(d.prompt_ids, i == 0 ? prompt : std::vector<int32_t>{}) << i;
    EXPECT_EQ(d.finished, cumulative[i].finished) << i;
    ids.insert(ids.end(), d.token_ids.begin(), d.token_ids.end());
    text += d.text;
    logprobs.insert(logprobs.end(), d.logprobs.begin(), d.logprobs.end());
  }
  EXPECT_EQ(ids, want.token_ids);
  EXPECT_EQ(text, want.text);
  EXPECT_TRUE(same_logprobs(logprobs, want.logprobs));
  EXPECT_EQ(delta.back().metrics.num_output_tokens, want.metrics.num_output_tokens);

  ASSERT_EQ(final_only.size(), 1u);
  const RequestOutput& f = final_only[0];
  EXPECT_TRUE(f.finished);
  EXPECT_EQ(f.prompt_ids, prompt);
  EXPECT_EQ(f.token_ids, want.token_ids);
  EXPECT_EQ(f.text, want.text);
  EXPECT_EQ(f.new_text, want.text);  // nothing was sent before
  EXPECT_TRUE(same_logprobs(f.logprobs, want.logprobs));
  EXPECT_EQ(f.finish_reason, want.finish_reason);
}

TEST(OutputKind, AbortedFinalOnlyRequestStillReportsOnce) {
  EngineOptions o;
  LLMEngine engine(test::kDemoModel, o);
  SamplingParams p = test::greedy(50);
  p.output_kind = RequestOutputKind::FinalOnly;
  engine.add_request("a", {1, 403, 407}, p);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(engine.step().empty()) << "step " << i;
  engine.abort_request("a");
  const auto outs = engine.step();
  ASSERT_EQ(outs.size(), 1u);
  EXPECT_TRUE(outs[0].finished);
  EXPECT_EQ(outs[0].finish_reason, FinishReason::Abort);
  EXPECT_EQ(outs[0].token_ids.size(), 3u);
}

}  // namespace
}  // namespace pagoda
