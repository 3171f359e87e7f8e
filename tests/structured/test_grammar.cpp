// The grammar text form, the regex and JSON-schema translations and the
// pushdown matcher, on byte strings (no vocabulary involved).
#include <gtest/gtest.h>

#include <memory>
#include <unordered_map>

#include "core/error.h"
#include "structured/compiled_grammar.h"
#include "structured/gbnf_parser.h"
#include "structured/grammar_matcher.h"
#include "structured/output_spec.h"

namespace pagoda::structured {
namespace {

// A vocabulary of the 256 single bytes (id = byte value) plus EOS = 256.
std::shared_ptr<const TokenVocab> byte_vocab() {
  std::vector<std::string> bytes(257);
  for (int b = 0; b < 256; ++b) bytes[b] = std::string(1, static_cast<char>(b));
  return std::make_shared<const TokenVocab>(std::move(bytes), std::vector<int32_t>{256});
}

std::shared_ptr<const CompiledGrammar> compile(const std::string& gbnf) {
  static const auto vocab = byte_vocab();
  return std::make_shared<const CompiledGrammar>(parse_gbnf(gbnf), vocab, gbnf);
}

// Whether `text` is a whole sentence (complete) / a valid prefix.
bool matches(const std::shared_ptr<const CompiledGrammar>& g, const std::string& text) {
  GrammarMatcher m(g);
  return m.accept_bytes(text) && m.is_complete();
}
bool prefix_ok(const std::shared_ptr<const CompiledGrammar>& g, const std::string& text) {
  GrammarMatcher m(g);
  return m.accept_bytes(text);
}

std::string error_of(const std::string& gbnf) {
  try {
    parse_gbnf(gbnf);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(Gbnf, LiteralsClassesAndQuantifiers) {
  const auto g = compile(R"(root ::= "a" [0-9]{2,3} ("x" | "yz")* [d-f]?  # comment
)");
  EXPECT_TRUE(matches(g, "a12"));
  EXPECT_TRUE(matches(g, "a123xyzx"));
  EXPECT_TRUE(matches(g, "a123d"));
  EXPECT_FALSE(matches(g, "a1"));
  EXPECT_FALSE(matches(g, "a1234"));
  EXPECT_FALSE(matches(g, "a12b"));
  EXPECT_TRUE(prefix_ok(g, "a12y"));
  EXPECT_FALSE(matches(g, "a12y"));
}

TEST(Gbnf, RulesRecursionAndUtf8Classes) {
  const auto g = compile("root ::= list\nlist ::= \"[\" (item (\",\" item)*)? \"]\"\nitem ::= list | [α-ω]+\n");
  EXPECT_TRUE(matches(g, "[]"));
  EXPECT_TRUE(matches(g, "[[αβ],γ,[]]"));
  EXPECT_FALSE(matches(g, "[a]"));
  // A partial character survives only if some completion is in the class:
  // U+03B1 is CE B1; CE alone can still become α, D0 (Cyrillic) cannot.
  EXPECT_TRUE(prefix_ok(g, "[\xCE"));
  EXPECT_FALSE(prefix_ok(g, "[\xD0"));
}

TEST(Gbnf, ErrorsNameTheProblem) {
  EXPECT_NE(error_of("root ::= \"a").find("unclosed string literal"), std::string::npos);
  EXPECT_NE(error_of("root ::= foo\n").find("'foo' is used but never defined"), std::string::npos);
  EXPECT_NE(error_of("x ::= \"a\"\n").find("no 'root' rule"), std::string::npos);
  EXPECT_NE(error_of("root ::= root \"a\" | \"b\"").find("left-recursive"), std::string::npos);
  EXPECT_NE(error_of("root ::= (\"a\"?)*").find("empty string"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\" root").find("can never finish"), std::string::npos);
  EXPECT_NE(error_of("root ::= [b-a]").find("out of order"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\"{3,1}").find("n < m"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\"\nroot ::= \"b\"").find("defined twice"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\" @").find("line 1 column 14"), std::string::npos);
  // Nesting and size are bounded (the parser and matcher recurse).
  EXPECT_NE(error_of("root ::= " + std::string(300, '(') + "\"a\"" + std::string(300, ')')).find("nested deeper"),
            std::string::npos);
  std::string many = "root ::= r0\n";
  for (int i = 0; i < 5000; ++i) many += "r" + std::to_string(i) + " ::= \"x\" r" + std::to_string(i + 1) + "?\n";
  many += "r5000 ::= \"y\"\n";
  EXPECT_NE(error_of(many).find("at most 4096"), std::string::npos);
}

TEST(Matcher, EosOnlyWhenCompleteAndRollback) {
  const auto g = compile("root ::= \"ab\" \"c\"?");
  GrammarMatcher m(g, /*max_rollback=*/4);
  EXPECT_FALSE(m.accept_token(256));  // EOS before "ab"
  EXPECT_TRUE(m.accept_token('a'));
  EXPECT_FALSE(m.accept_token('c'));
  EXPECT_TRUE(m.accept_token('b'));
  EXPECT_TRUE(m.is_complete());
  EXPECT_FALSE(m.must_end());
  auto mask = m.mask();
  EXPECT_TRUE(mask_allows(*mask, 256));
  EXPECT_TRUE(mask_allows(*mask, 'c'));
  EXPECT_FALSE(mask_allows(*mask, 'a'));
  EXPECT_TRUE(m.accept_token('c'));
  EXPECT_TRUE(m.must_end());
  mask = m.mask();
  for (int id = 0; id < 256; ++id) EXPECT_FALSE(mask_allows(*mask, id)) << id;
  EXPECT_TRUE(mask_allows(*mask, 256));
  EXPECT_TRUE(m.accept_token(256));
  EXPECT_TRUE(m.is_terminated());
  m.rollback(2);  // EOS and 'c'
  EXPECT_FALSE(m.is_terminated());
  EXPECT_EQ(m.num_steps(), 2);
  EXPECT_TRUE(m.accept_token('c'));
}

// A matcher keeps the states of its last max_rollback steps and no more
// (none by default, as the engine builds them: constrained requests do not
// speculate), so memory does not grow with the output.
TEST(Matcher, KeepsOnlyTheStatesRollbackNeeds) {
  const auto g = compile("root ::= [a-z]+ \";\"");
  GrammarMatcher plain(g);
  for (char c : std::string("abcdef")) ASSERT_TRUE(plain.accept_token(c));
  EXPECT_EQ(plain.num_steps(), 6);
  EXPECT_EQ(plain.num_rollback(), 0);
  EXPECT_THROW(plain.rollback(1), InternalError);
  plain.rollback(0);

  GrammarMatcher m(g, /*max_rollback=*/2);
  for (char c : std::string("abcdef")) ASSERT_TRUE(m.accept_token(c));
  EXPECT_EQ(m.num_rollback(), 2);
  EXPECT_THROW(m.rollback(3), InternalError);
  ASSERT_TRUE(m.accept_token(';'));
  EXPECT_TRUE(m.is_complete());
  m.rollback(2);  // ';' and 'f': back inside the word
  EXPECT_EQ(m.num_steps(), 5);
  EXPECT_EQ(m.num_rollback(), 0);
  EXPECT_FALSE(m.is_complete());
  EXPECT_FALSE(m.accept_token(256));
  ASSERT_TRUE(m.accept_token(';'));
  EXPECT_TRUE(m.is_complete());
  EXPECT_EQ(m.num_rollback(), 1);
}

// Token terminals: 0-255 the bytes, 256 EOS, 257 a special token
// "<|call|>" (no bytes), 258 a multi-byte token "<t>".
std::shared_ptr<const TokenVocab> vocab_with_tokens() {
  std::vector<std::string> bytes(259);
  for (int b = 0; b < 256; ++b) bytes[b] = std::string(1, static_cast<char>(b));
  bytes[258] = "<t>";
  return std::make_shared<const TokenVocab>(std::move(bytes), std::vector<int32_t>{256},
                                            std::unordered_map<std::string, int32_t>{{"<|call|>", 257}});
}

std::vector<int32_t> allowed(const GrammarMatcher& m) {
  std::vector<int32_t> ids;
  const auto mask = m.mask();
  for (int32_t id = 0; id < 259; ++id)
    if (mask_allows(*mask, id)) ids.push_back(id);
  return ids;
}

TEST(Matcher, TokenTerminalsMatchOneIdNeverItsSpelling) {
  const auto vocab = vocab_with_tokens();
  const std::string text = "root ::= <|call|> \"x\" <[258]>{1,2} \"y\"";
  const auto g = std::make_shared<const CompiledGrammar>(parse_gbnf(text), vocab, text);
  EXPECT_EQ(g->grammar().to_string(), "root ::= <|call|> \"x\" <[258]>{1,2} \"y\"\n");
  GrammarMatcher m(g);
  EXPECT_EQ(allowed(m), std::vector<int32_t>{257});
  EXPECT_FALSE(m.accept_bytes("<|call|>"));  // the text is not the token
  ASSERT_TRUE(m.accept_token(257));
  ASSERT_TRUE(m.accept_token('x'));
  EXPECT_EQ(allowed(m), std::vector<int32_t>{258});  // not '<', which would start "<t>" by bytes
  EXPECT_FALSE(m.accept_token('<'));
  ASSERT_TRUE(m.accept_token(258));
  EXPECT_EQ(allowed(m), (std::vector<int32_t>{'y', 258}));
  ASSERT_TRUE(m.accept_token(258));
  EXPECT_EQ(allowed(m), std::vector<int32_t>{'y'});
  ASSERT_TRUE(m.accept_token('y'));
  EXPECT_TRUE(m.is_complete());
  EXPECT_TRUE(m.accept_token(256));
}

// A token with bytes is read both ways: as a token terminal and as bytes
// continuing a literal; each reading keeps its own stacks.
TEST(Matcher, TokenAndItsBytesAreBothReadings) {
  const auto vocab = vocab_with_tokens();
  const std::string text = "root ::= <[258]> \"!\" | \"<t>z\"";
  const auto g = std::make_shared<const CompiledGrammar>(parse_gbnf(text), vocab, text);
  GrammarMatcher m(g, 1);
  EXPECT_EQ(allowed(m), (std::vector<int32_t>{'<', 258}));
  ASSERT_TRUE(m.accept_token(258));
  EXPECT_EQ(allowed(m), (std::vector<int32_t>{'!', 'z'}));
  ASSERT_TRUE(m.accept_token('z'));
  EXPECT_TRUE(m.is_complete());
  m.rollback(1);
  ASSERT_TRUE(m.accept_token('!'));
  EXPECT_TRUE(m.is_complete());
  GrammarMatcher spelled(g);
  ASSERT_TRUE(spelled.accept_bytes("<t>"));
  EXPECT_EQ(allowed(spelled), std::vector<int32_t>{'z'});
}

TEST(Matcher, TokenTerminalErrorsNameTheToken) {
  const auto vocab = vocab_with_tokens();
  auto compile_error = [&](const std::string& text) -> std::string {
    try {
      CompiledGrammar(parse_gbnf(text), vocab, text);
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(compile_error("root ::= <nope>").find("token <nope> is not a token of the vocabulary"),
            std::string::npos);
  EXPECT_NE(compile_error("root ::= <[259]>").find("<[259]> is not a token of the vocabulary (259 ids)"),
            std::string::npos);
  EXPECT_NE(compile_error("root ::= \"a\" <[256]>").find("<[256]> is end-of-sequence"), std::string::npos);
  EXPECT_NE(error_of("root ::= <[12a]>").find("needs a decimal id"), std::string::npos);
  EXPECT_NE(error_of("root ::= <abc\n").find("line 1 column 10: unclosed token"), std::string::npos);
  EXPECT_NE(error_of("root ::= <>").find("empty token"), std::string::npos);
  EXPECT_NE(error_of("root ::= <[99999999999]>").find("out of range"), std::string::npos);
}

std::shared_ptr<const CompiledGrammar> compile_spec(OutputSpec::Kind kind, const std::string& value) {
  return compile(OutputSpec{kind, value}.to_gbnf());
}

TEST(Regex, FullMatchSubset) {
  const auto g = compile_spec(OutputSpec::Kind::Regex, R"(^(\d{3}-)?[A-Z][a-z]+(?:, [A-Z]{2})?\.?$)");
  EXPECT_TRUE(matches(g, "Paris"));
  EXPECT_TRUE(matches(g, "555-Austin, TX."));
  EXPECT_FALSE(matches(g, "55-Austin"));
  EXPECT_FALSE(matches(g, "paris"));
  const auto any = compile_spec(OutputSpec::Kind::Regex, "a.c|[^x-z]{2}\\s");
  EXPECT_TRUE(matches(any, "abc"));
  EXPECT_FALSE(matches(any, "a\nc"));
  EXPECT_TRUE(matches(any, "qq\t"));
  EXPECT_FALSE(matches(any, "xq "));
}

std::string spec_error(OutputSpec::Kind kind, const std::string& value) {
  try {
    OutputSpec{kind, value}.to_gbnf();
    return "";
  } catch (const InputError& e) {
    return e.what();
  }
}

TEST(Regex, UnsupportedConstructsAreErrors) {
  using K = OutputSpec::Kind;
  EXPECT_NE(spec_error(K::Regex, "(a)\\1").find("backreferences"), std::string::npos);
  EXPECT_NE(spec_error(K::Regex, "a(?=b)").find("lookaround"), std::string::npos);
  EXPECT_NE(spec_error(K::Regex, "\\bword").find("word boundaries"), std::string::npos);
  EXPECT_NE(spec_error(K::Regex, "(ab").find("unclosed '('"), std::string::npos);
  EXPECT_NE(spec_error(K::Regex, "a**").find("nested quantifier"), std::string::npos);
  EXPECT_NE(spec_error(K::Regex, "a^b").find("anchors"), std::string::npos);
  EXPECT_NE(spec_error(K::Regex, std::string(100, '(') + "a" + std::string(100, ')')).find("nested deeper"),
            std::string::npos);
}

TEST(Choice, AlternativesOfLiterals) {
  const auto g = compile_spec(OutputSpec::Kind::Choice, R"(["yes", "no", "no way"])");
  EXPECT_TRUE(matches(g, "yes"));
  EXPECT_TRUE(matches(g, "no"));
  EXPECT_TRUE(matches(g, "no way"));
  EXPECT_FALSE(matches(g, "ye"));
  EXPECT_NE(spec_error(OutputSpec::Kind::Choice, "[]").find("non-empty"), std::string::npos);
  EXPECT_NE(spec_error(OutputSpec::Kind::Choice, "[1]").find("strings"), std::string::npos);
}

TEST(JsonSchema, ObjectsWithOptionalFieldsInOrder) {
  const auto g = compile_spec(OutputSpec::Kind::JsonSchema, R"({
    "type": "object",
    "properties": {"a": {"type": "integer", "minimum": -5, "maximum": 120},
                   "b": {"type": "string", "maxLength": 3},
                   "c": {"enum": ["x", 1, null]}},
    "required": ["b"]})");
  EXPECT_TRUE(matches(g, R"({"b":""})"));
  EXPECT_TRUE(matches(g, R"({"a":-5,"b":"xyz","c":null})"));
  EXPECT_TRUE(matches(g, R"({"a":120,"b":"q","c":"x"})"));
  EXPECT_FALSE(matches(g, R"({"a":121,"b":"q"})"));
  EXPECT_FALSE(matches(g, R"({"a":-6,"b":"q"})"));
  EXPECT_FALSE(matches(g, R"({"a":07,"b":"q"})"));
  EXPECT_FALSE(matches(g, R"({"b":"long"})"));
  EXPECT_FALSE(matches(g, R"({"a":1})"));
  EXPECT_FALSE(matches(g, R"({"b":"q","a":1})"));  // schema order
  EXPECT_FALSE(matches(g, R"({"b":"q","c":2})"));
  EXPECT_FALSE(matches(g, R"({ "b":"q"})"));       // compact
}

TEST(JsonSchema, ArraysNumbersRefsAndFormats) {
  const auto g = compile_spec(OutputSpec::Kind::JsonSchema, R"({
    "$defs": {"node": {"type": "object", "properties": {"v": {"type": "number", "minimum": -1, "maximum": 2},
                                                         "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
                       "required": ["v"]}},
    "type": "array", "items": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "string", "format": "date"}]},
    "minItems": 1, "maxItems": 3})");
  EXPECT_TRUE(matches(g, R"([{"v":0}])"));
  EXPECT_TRUE(matches(g, R"([{"v":-0.5,"kids":[{"v":1.25}]},"2024-02-29"])"));
  EXPECT_TRUE(matches(g, R"([{"v":2},{"v":1.5},{"v":-1}])"));
  EXPECT_FALSE(matches(g, R"([])"));
  EXPECT_FALSE(matches(g, R"([{"v":2.5}])"));
  EXPECT_FALSE(matches(g, R"([{"v":-1.5}])"));
  EXPECT_FALSE(matches(g, R"([{"v":1},{"v":1},{"v":1},{"v":1}])"));
  EXPECT_FALSE(matches(g, R"(["2024-13-01"])"));
}

TEST(JsonSchema, UnsupportedKeywordsAreNamed) {
  using K = OutputSpec::Kind;
  EXPECT_NE(spec_error(K::JsonSchema, R"({"type":"array","uniqueItems":true})").find("\"uniqueItems\""),
            std::string::npos);
  EXPECT_NE(spec_error(K::JsonSchema, R"({"type":"string","format":"hostname"})").find("format \"hostname\""),
            std::string::npos);
  EXPECT_NE(spec_error(K::JsonSchema, R"({"type":"strin"})").find("unknown type \"strin\""), std::string::npos);
  EXPECT_NE(spec_error(K::JsonSchema, R"({"$ref":"#/$defs/missing"})").find("#/$defs/missing"), std::string::npos);
  EXPECT_NE(spec_error(K::JsonSchema, R"({"type":"string","pattern":"(a"})").find("regex"), std::string::npos);
  EXPECT_NE(spec_error(K::JsonSchema, "{not json").find("not valid JSON"), std::string::npos);
  EXPECT_NE(spec_error(K::JsonSchema, R"({"properties":{"a":{"type":"integer","minimum":5,"maximum":4}}})")
                .find("at root/properties/a"),
            std::string::npos);
}

}  // namespace
}  // namespace pagoda::structured
