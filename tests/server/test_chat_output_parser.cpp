// The reasoning and tool-call parsers on fixtures of real model output
// formats (tests/data/chat_outputs): the whole output splits as the
// fixture says, and the same output fed in pieces (every two-piece split,
// byte by byte, and the Qwen3 tokenizer's own tokens as the server streams
// them) joins to exactly the same result.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/chat_output_parser.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::server {
namespace {

using Json = nlohmann::ordered_json;

struct Case {
  Json spec;
  std::string output;
};

std::vector<Case> load_cases() {
  std::ifstream in(PAGODA_TEST_DATA_DIR "/chat_outputs/cases.jsonl");
  EXPECT_TRUE(in) << "missing tests/data/chat_outputs/cases.jsonl";
  std::vector<Case> cases;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    Json j = Json::parse(line);
    cases.push_back({j, j["output"].get<std::string>()});
  }
  return cases;
}

ChatOutputParser make_parser(const Json& spec) {
  std::optional<bool> thinking;
  if (spec.contains("reasoning_parser")) {
    const auto format = reasoning_format_from_name(spec["reasoning_parser"].get<std::string>());
    EXPECT_TRUE(format.has_value()) << spec["reasoning_parser"];
    thinking = starts_thinking(*format, spec.value("chat_template_kwargs", Json::object()));
  }
  const ToolCallFormat* tools = nullptr;
  if (spec.contains("tool_parser")) {
    tools = tool_call_format(spec["tool_parser"].get<std::string>());
    EXPECT_NE(tools, nullptr) << spec["tool_parser"];
  }
  return ChatOutputParser(thinking, tools);
}

// Everything a parser returned, joined.
struct Result {
  std::string reasoning, content;
  std::vector<ParsedToolCall> calls;
  void add(ChatOutputDelta d) {
    reasoning += d.reasoning;
    content += d.content;
    for (auto& c : d.calls) calls.push_back(std::move(c));
  }
  bool operator==(const Result&) const = default;
};

Result run(const Json& spec, const std::vector<std::string>& pieces) {
  ChatOutputParser parser = make_parser(spec);
  Result r;
  for (const std::string& p : pieces) r.add(parser.feed(p));
  r.add(parser.finish());
  return r;
}

std::string describe(const Result& r) {
  Json calls = Json::array();
  for (const auto& c : r.calls) calls.push_back({{"name", c.name}, {"arguments", c.arguments}});
  return Json({{"reasoning", r.reasoning}, {"content", r.content}, {"calls", calls}}).dump();
}

TEST(ChatOutputParser, FixturesSplitAsExpected) {
  const auto cases = load_cases();
  ASSERT_GE(cases.size(), 20u);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.spec["name"].get<std::string>());
    const Result r = run(c.spec, {c.output});
    auto text = [](const Json& v) { return v.is_null() ? std::string() : v.get<std::string>(); };
    EXPECT_EQ(r.reasoning, text(c.spec["reasoning"]));
    EXPECT_EQ(r.content, text(c.spec["content"]));
    const Json want = c.spec.value("tool_calls", Json::array());
    ASSERT_EQ(r.calls.size(), want.size()) << describe(r);
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(r.calls[i].name, want[i]["name"].get<std::string>());
      // The arguments are a JSON object as text; compared as JSON.
      const Json args = Json::parse(r.calls[i].arguments, nullptr, false);
      ASSERT_FALSE(args.is_discarded()) << r.calls[i].arguments;
      EXPECT_EQ(args, want[i]["arguments"]) << r.calls[i].arguments;
    }
  }
}

TEST(ChatOutputParser, EverySplitStreamsToTheWholeResult) {
  for (const Case& c : load_cases()) {
    SCOPED_TRACE(c.spec["name"].get<std::string>());
    const Result whole = run(c.spec, {c.output});
    for (size_t at = 0; at <= c.output.size(); ++at) {
      const Result split = run(c.spec, {c.output.substr(0, at), c.output.substr(at)});
      ASSERT_EQ(split, whole) << "split at byte " << at << ": " << describe(split);
    }
    std::vector<std::string> bytes;
    for (char ch : c.output) bytes.emplace_back(1, ch);
    EXPECT_EQ(run(c.spec, bytes), whole) << "byte by byte: " << describe(run(c.spec, bytes));
  }
}

// Pieces as the server streams them: the Qwen3 tokenizer's tokens through
// the incremental detokenizer (whole UTF-8 characters only).
TEST(ChatOutputParser, TokenByTokenStreamsToTheWholeResult) {
  const auto tok = Tokenizer::load(PAGODA_TEST_DATA_DIR "/tokenizers/qwen3");
  for (const Case& c : load_cases()) {
    SCOPED_TRACE(c.spec["name"].get<std::string>());
    const std::vector<int32_t> ids = tok->encode(c.output, false);
    IncrementalDetokenizer detok(*tok, {}, /*skip_special_tokens=*/false);
    std::vector<std::string> pieces;
    for (int32_t id : ids) pieces.push_back(detok.push(id));
    pieces.push_back(detok.flush());
    std::string joined;
    for (const auto& p : pieces) joined += p;
    ASSERT_EQ(joined, c.output) << "the tokenizer does not round-trip the fixture";
    EXPECT_GE(ids.size(), 3u);
    EXPECT_EQ(run(c.spec, pieces), run(c.spec, {c.output}));
  }
}

TEST(ChatOutputParser, NamesAreVllms) {
  EXPECT_TRUE(reasoning_format_from_name("qwen3"));
  EXPECT_TRUE(reasoning_format_from_name("deepseek_r1"));
  EXPECT_TRUE(reasoning_format_from_name("deepseek_v3"));
  EXPECT_FALSE(reasoning_format_from_name("qwen"));
  EXPECT_NE(tool_call_format("hermes"), nullptr);
  EXPECT_NE(tool_call_format("deepseek_v3"), nullptr);
  EXPECT_NE(tool_call_format("deepseek_v31"), nullptr);
  EXPECT_EQ(tool_call_format("qwen3_coder"), nullptr);
}

TEST(ChatOutputParser, ThinkingDefaultsFollowVllm) {
  const Json none = Json::object();
  EXPECT_TRUE(starts_thinking(ReasoningFormat::Qwen3, none));
  EXPECT_FALSE(starts_thinking(ReasoningFormat::Qwen3, {{"enable_thinking", false}}));
  EXPECT_TRUE(starts_thinking(ReasoningFormat::DeepSeekR1, {{"enable_thinking", false}}));
  EXPECT_FALSE(starts_thinking(ReasoningFormat::DeepSeekV3, none));
  EXPECT_TRUE(starts_thinking(ReasoningFormat::DeepSeekV3, {{"thinking", true}}));
  EXPECT_TRUE(starts_thinking(ReasoningFormat::DeepSeekV3, {{"enable_thinking", true}}));
}

}  // namespace
}  // namespace pagoda::server
