// tool_choice "required" / named function grammars on real vocabularies:
// DeepSeek V3's (tests/data/tokenizers/deepseek_v3, whose tool-call
// markers are added tokens) and Qwen3's (hermes, <tool_call>). Random
// walks take any token the mask allows (as random weights do) until the
// grammar ends; the ids, decoded as the server decodes them, must give the
// format's parser valid calls of the request's tools, with every marker
// written as its one token. The same with the markers made special tokens
// (no bytes at all: what a grammar of text could never produce).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "core/error.h"
#include "server/tool_call_parser.h"
#include "server/tool_choice_grammar.h"
#include "structured/gbnf_parser.h"
#include "structured/grammar_matcher.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::server {
namespace {

using Json = nlohmann::ordered_json;
using structured::CompiledGrammar;
using structured::GrammarMatcher;
using structured::TokenVocab;

constexpr int32_t kDeepSeekLogits = 129280;  // DeepSeek V3's vocab_size
constexpr int32_t kDeepSeekEos = 1;          // <｜end▁of▁sentence｜>
constexpr int32_t kMarkers[] = {128806, 128807, 128808, 128809, 128814};  // calls begin/end, call begin/end, sep

const Json kTools = Json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string", "maxLength": 12}, "unit": {"enum": ["c", "f"]}}, "required": ["city"]}}},
  {"type": "function", "function": {"name": "add", "parameters": {"type": "object",
    "properties": {"a": {"type": "integer", "minimum": -100, "maximum": 100},
                   "b": {"type": "number", "minimum": 0, "maximum": 10}}, "required": ["a", "b"]}}}])");

// The arguments against the tools' schemas above, checked by hand.
void expect_valid_call(const ParsedToolCall& call, const std::string& only) {
  if (!only.empty()) {
    EXPECT_EQ(call.name, only);
  }
  const Json args = Json::parse(call.arguments, nullptr, false);
  ASSERT_TRUE(args.is_object()) << call.arguments;
  if (call.name == "get_weather") {
    ASSERT_TRUE(args.contains("city") && args["city"].is_string()) << call.arguments;
    EXPECT_LE(args["city"].get<std::string>().size(), 48u);  // 12 characters, up to 4 bytes each
    if (args.contains("unit")) {
      EXPECT_TRUE(args["unit"] == "c" || args["unit"] == "f") << call.arguments;
    }
    for (const auto& [k, v] : args.items()) EXPECT_TRUE(k == "city" || k == "unit") << k;
  } else {
    ASSERT_EQ(call.name, "add");
    ASSERT_TRUE(args.contains("a") && args["a"].is_number_integer()) << call.arguments;
    ASSERT_TRUE(args.contains("b") && args["b"].is_number()) << call.arguments;
    EXPECT_GE(args["a"].get<int64_t>(), -100);
    EXPECT_LE(args["a"].get<int64_t>(), 100);
    EXPECT_GE(args["b"].get<double>(), 0);
    EXPECT_LE(args["b"].get<double>(), 10);
  }
}

// A walk from the grammar's start to its end (EOS or nothing more), each
// step a token the mask allows, short ones preferred now and then so that
// bounded strings finish. Returns the ids (EOS excluded).
std::vector<int32_t> random_walk(const std::shared_ptr<const CompiledGrammar>& g, uint64_t seed) {
  std::mt19937_64 rng(seed);
  GrammarMatcher m(g);
  std::vector<int32_t> ids;
  const TokenVocab& vocab = g->vocab();
  for (int step = 0; step < 600 && !m.is_terminated() && !m.must_end(); ++step) {
    const auto mask = m.mask();
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < vocab.size(); ++id)
      if (structured::mask_allows(*mask, id)) allowed.push_back(id);
    EXPECT_FALSE(allowed.empty());
    if (allowed.empty()) break;
    int32_t id = allowed[rng() % allowed.size()];
    for (int tries = 0; tries < 8 && rng() % 2 == 0; ++tries) {
      const int32_t other = allowed[rng() % allowed.size()];
      if (vocab.bytes(other).size() < vocab.bytes(id).size()) id = other;
    }
    if (m.is_complete() && rng() % 2 == 0) id = vocab.eos_ids().front();
    EXPECT_TRUE(m.accept_token(id)) << id;
    if (!m.is_terminated()) ids.push_back(id);
  }
  EXPECT_TRUE(m.is_terminated() || m.must_end()) << "the walk did not finish";
  return ids;
}

// Decodes as the server does for a tool-call request (special tokens
// kept, piece by piece) and parses the calls.
std::vector<ParsedToolCall> parse_output(const Tokenizer& tok, const ToolCallFormat& format,
                                         const std::vector<int32_t>& ids, std::string* text) {
  IncrementalDetokenizer detok(tok, {}, /*skip_special_tokens=*/false);
  ToolCallParser parser(format);
  std::vector<ParsedToolCall> calls;
  std::string content;
  auto take = [&](ToolCallDelta d) {
    content += d.content;
    calls.insert(calls.end(), d.calls.begin(), d.calls.end());
  };
  for (int32_t id : ids) take(parser.feed(detok.push(id)));
  take(parser.feed(detok.flush()));
  take(parser.finish());
  *text = detok.text();
  EXPECT_EQ(content, "") << "text outside the calls: " << *text;
  return calls;
}

void check_walks(const Tokenizer& tok, const std::shared_ptr<const TokenVocab>& vocab, const char* parser_name,
                 const std::vector<int32_t>& marker_ids) {
  const ToolCallFormat& format = *tool_call_format(parser_name);
  for (const std::string only : {"", "get_weather", "add"}) {
    const std::string gbnf = tool_choice_gbnf(format, kTools, only, vocab.get());
    for (int32_t id : marker_ids)
      EXPECT_NE(gbnf.find("<[" + std::to_string(id) + "]>"), std::string::npos) << gbnf;
    const auto g = std::make_shared<const CompiledGrammar>(structured::parse_gbnf(gbnf), vocab, gbnf);
    for (uint64_t seed = 1; seed <= 4; ++seed) {
      SCOPED_TRACE(std::string(parser_name) + " only=" + only + " seed " + std::to_string(seed));
      const std::vector<int32_t> ids = random_walk(g, seed);
      std::string text;
      const std::vector<ParsedToolCall> calls = parse_output(tok, format, ids, &text);
      ASSERT_GE(calls.size(), 1u) << text;
      ASSERT_LE(calls.size(), only.empty() ? 4u : 1u) << text;
      for (const ParsedToolCall& c : calls) expect_valid_call(c, only);
      // Every marker is its one token: as many marker tokens as the text
      // has markers (none spelled from pieces).
      for (int32_t marker : marker_ids) {
        const std::string marker_text = tok.decode(std::vector<int32_t>{marker}, false);
        size_t in_text = 0;
        for (size_t at = text.find(marker_text); at != std::string::npos; at = text.find(marker_text, at + 1))
          ++in_text;
        EXPECT_EQ(static_cast<size_t>(std::count(ids.begin(), ids.end(), marker)), in_text) << marker_text;
        EXPECT_GE(in_text, 1u) << marker_text << " missing from " << text;
      }
    }
  }
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ToolChoiceGrammar, DeepSeekMarkersAreTheirTokens) {
  const auto tok = Tokenizer::load(PAGODA_TEST_DATA_DIR "/tokenizers/deepseek_v3");
  for (int32_t id : kMarkers) ASSERT_FALSE(tok->is_special(id)) << "the real tokenizer's markers are added, not special";
  const auto vocab = std::make_shared<const TokenVocab>(*tok, kDeepSeekLogits, std::vector<int32_t>{kDeepSeekEos});
  const std::vector<int32_t> markers(std::begin(kMarkers), std::end(kMarkers));
  check_walks(*tok, vocab, "deepseek_v3", markers);
  check_walks(*tok, vocab, "deepseek_v31", markers);
}

// The same markers flagged special (as some tokenizers mark theirs): they
// have no bytes, so only a token terminal can admit them.
TEST(ToolChoiceGrammar, SpecialTokenMarkersAreAdmittedById) {
  const std::string dir = ::testing::TempDir() + "/deepseek_v3_special_markers";
  std::filesystem::create_directories(dir);
  // (Unordered: ordered_json's 128k-key vocab object parses in quadratic time.)
  nlohmann::json j = nlohmann::json::parse(read_file(PAGODA_TEST_DATA_DIR "/tokenizers/deepseek_v3/tokenizer.json"));
  for (auto& t : j["added_tokens"])
    if (t["content"].get<std::string>().find("tool") != std::string::npos) t["special"] = true;
  std::ofstream(dir + "/tokenizer.json") << j.dump();
  std::ofstream(dir + "/tokenizer_config.json")
      << read_file(PAGODA_TEST_DATA_DIR "/tokenizers/deepseek_v3/tokenizer_config.json");
  const auto tok = Tokenizer::load(dir);
  for (int32_t id : kMarkers) ASSERT_TRUE(tok->is_special(id));
  const auto vocab = std::make_shared<const TokenVocab>(*tok, kDeepSeekLogits, std::vector<int32_t>{kDeepSeekEos});
  for (int32_t id : kMarkers) ASSERT_EQ(vocab->bytes(id), "");
  const std::vector<int32_t> markers(std::begin(kMarkers), std::end(kMarkers));
  check_walks(*tok, vocab, "deepseek_v3", markers);
  check_walks(*tok, vocab, "deepseek_v31", markers);
  std::filesystem::remove_all(dir);
}

TEST(ToolChoiceGrammar, HermesToolCallIsQwen3sToken) {
  const auto tok = Tokenizer::load(PAGODA_TEST_DATA_DIR "/tokenizers/qwen3");
  const auto vocab = std::make_shared<const TokenVocab>(*tok, 151936, std::vector<int32_t>{151643, 151645});
  check_walks(*tok, vocab, "hermes", {*tok->token_to_id("<tool_call>"), *tok->token_to_id("</tool_call>")});
}

// Without a vocabulary (or one without the marker as a token) the markers
// stay text, as before.
TEST(ToolChoiceGrammar, MarkersWithoutAVocabularyAreText) {
  const std::string gbnf = tool_choice_gbnf(*tool_call_format("deepseek_v3"), kTools, "add", nullptr);
  EXPECT_EQ(gbnf.find("<["), std::string::npos) << gbnf;
  EXPECT_NE(gbnf.find("\"<｜tool▁call▁begin｜>\""), std::string::npos) << gbnf;
}

}  // namespace
}  // namespace pagoda::server
