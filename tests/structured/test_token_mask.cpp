// Token masks over the real Qwen3 vocabulary (151,936 logits) against a
// brute-force reference: every token's bytes run through the matcher one
// by one (and every id through the token terminals). The fast mask (trie walk, whole-subtree shortcut, cache) must
// equal it in every state of random constrained walks, and every token a
// walk takes keeps the text a valid prefix when re-matched from scratch.
#include <gtest/gtest.h>

#include <random>

#include "structured/gbnf_parser.h"
#include "structured/grammar_matcher.h"
#include "structured/output_spec.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::structured {
namespace {

constexpr int32_t kQwen3Logits = 151936;
const std::vector<int32_t> kQwen3Eos = {151643, 151645};

const std::shared_ptr<const TokenVocab>& qwen3_vocab() {
  static const auto vocab = [] {
    const auto tok = Tokenizer::load(std::string(PAGODA_TEST_DATA_DIR) + "/tokenizers/qwen3");
    return std::make_shared<const TokenVocab>(*tok, kQwen3Logits, kQwen3Eos);
  }();
  return vocab;
}

TokenMask brute_force_mask(const CompiledGrammar& g, const MatcherState& state) {
  const TokenVocab& vocab = g.vocab();
  TokenMask mask((vocab.size() + 63) / 64, 0);
  for (int32_t id = 0; id < vocab.size(); ++id) {
    bool ok;
    if (std::find(kQwen3Eos.begin(), kQwen3Eos.end(), id) != kQwen3Eos.end()) {
      ok = state.complete;
    } else {
      MatcherState s = state, by_token;
      ok = (!vocab.bytes(id).empty() && g.advance_bytes(s, vocab.bytes(id))) ||
           g.advance_token(state, id, by_token);
    }
    if (ok) mask[id >> 6] |= uint64_t{1} << (id & 63);
  }
  return mask;
}

TEST(TokenVocab, Qwen3BytesAndTrie) {
  const TokenVocab& v = *qwen3_vocab();
  EXPECT_EQ(v.size(), kQwen3Logits);
  const auto tok = Tokenizer::load(std::string(PAGODA_TEST_DATA_DIR) + "/tokenizers/qwen3");
  // Byte-level tokens come back as their bytes; specials and unused ids as "".
  for (const char* text : {" hello", "{\"", "\xE4\xBD\xA0\xE5\xA5\xBD"}) {
    std::string joined;
    for (int32_t id : tok->encode(text, false)) joined += v.bytes(id);
    EXPECT_EQ(joined, text);
  }
  EXPECT_EQ(v.bytes(151645), "");  // <|im_end|>
  EXPECT_EQ(v.bytes(151935), "");  // past the tokenizer
  EXPECT_EQ(v.bytes(*tok->token_to_id("<tool_call>")), "<tool_call>");  // a non-special added token
  // Every trie subtree's token run shares the node's prefix.
  const auto& nodes = v.nodes();
  for (size_t n = 1; n < nodes.size(); n += 997) {
    std::string prefix;
    for (int32_t x = static_cast<int32_t>(n); x > 0; x = nodes[x].parent) prefix.insert(prefix.begin(), char(nodes[x].byte));
    for (int32_t k = nodes[n].token_begin; k < nodes[n].token_end; ++k)
      ASSERT_EQ(v.bytes(v.sorted_ids()[k]).compare(0, prefix.size(), prefix), 0);
  }
}

struct Case {
  std::string name;  // the test's name suffix
  OutputSpec::Kind kind;
  std::string value;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class RandomWalk : public ::testing::TestWithParam<Case> {};

TEST_P(RandomWalk, FastMaskEqualsBruteForceAndPrefixesStayValid) {
  const Case& c = GetParam();
  const OutputSpec spec{c.kind, c.value};
  const auto g = std::make_shared<const CompiledGrammar>(parse_gbnf(spec.to_gbnf()), qwen3_vocab(), c.value);
  for (uint64_t seed : {1u, 2u}) {
    std::mt19937_64 rng(seed);
    GrammarMatcher m(g);
    std::string text;
    std::vector<int32_t> ids;
    for (int step = 0; step < 120 && !m.is_terminated(); ++step) {
      const auto mask = m.mask();
      // The state re-matched from scratch: the text's bytes, or with
      // token terminals (special tokens have no bytes) the ids one by one.
      GrammarMatcher fresh(g);
      if (g->has_token_terminals()) {
        for (int32_t id : ids) ASSERT_TRUE(fresh.accept_token(id)) << id;
      } else {
        ASSERT_TRUE(fresh.accept_bytes(text)) << text;
      }
      if (step % 6 == 0) {
        const TokenMask brute = brute_force_mask(*g, fresh.state());
        ASSERT_EQ(*mask, brute) << "seed " << seed << " after " << text;
      }
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < kQwen3Logits; ++id)
        if (mask_allows(*mask, id)) allowed.push_back(id);
      ASSERT_FALSE(allowed.empty()) << "dead end after " << text;
      // Prefer short tokens now and then so bounded parts finish.
      int32_t id = allowed[rng() % allowed.size()];
      if (rng() % 2 == 0) {
        for (int tries = 0; tries < 8; ++tries) {
          const int32_t other = allowed[rng() % allowed.size()];
          if (qwen3_vocab()->bytes(other).size() < qwen3_vocab()->bytes(id).size()) id = other;
        }
      }
      if (m.is_complete() && rng() % 4 == 0) id = kQwen3Eos[0];
      ASSERT_TRUE(m.accept_token(id)) << id;
      text += qwen3_vocab()->bytes(id);
      ids.push_back(id);
    }
    GrammarMatcher replay(g);
    for (int32_t id : ids) ASSERT_TRUE(replay.accept_token(id)) << id;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Specs, RandomWalk,
    ::testing::Values(
        Case{"object_bounds", OutputSpec::Kind::JsonSchema,
             R"({"type":"object","properties":{"name":{"type":"string","maxLength":12},
                 "age":{"type":"integer","minimum":0,"maximum":150},
                 "tags":{"type":"array","items":{"enum":["a","b","c"]},"maxItems":3},
                 "score":{"type":"number","minimum":-10,"maximum":10}},"required":["name","age"]})"},
        Case{"unbounded_string", OutputSpec::Kind::JsonSchema, R"({"type":"string"})"},
        Case{"patterns_and_datetime", OutputSpec::Kind::JsonSchema,
             R"({"type":"object","properties":{"id":{"type":"string","pattern":"^[A-Z]{2}-\\d{3,5}$"},
                 "when":{"type":"string","format":"date-time"},"ok":{"type":"boolean"}}})"},
        Case{"json_object", OutputSpec::Kind::JsonObject, ""},
        Case{"regex_phone", OutputSpec::Kind::Regex, R"((\+\d{1,3} )?\(\d{3}\) \d{3}-\d{4})"},
        Case{"regex_cjk_or_words", OutputSpec::Kind::Regex, R"([\u4e00-\u9fff]{1,6}|[a-z ]{2,20}\.)"},
        Case{"choice", OutputSpec::Kind::Choice, R"(["positive","negative","neutral","mixed feelings"])"},
        Case{"grammar_arithmetic", OutputSpec::Kind::Grammar, "root ::= expr\nexpr ::= term ([+*-] term)*\nterm ::= [0-9]+ | \"(\" expr \")\"\n"},
        // Token terminals: a special token (<|im_start|>, no bytes) by text
        // and by id, and a non-special added token (<tool_call>) both as a
        // token terminal and as a literal of the same bytes.
        Case{"grammar_tokens", OutputSpec::Kind::Grammar,
             "root ::= <|im_start|> ([a-z ]{1,6} (<tool_call> | \"<tool_call>\" | <[151644]>))+\n"}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

}  // namespace
}  // namespace pagoda::structured
