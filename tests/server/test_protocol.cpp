// Request validation (issue 24, 4.7): every malformed or out-of-range field
// of a /v1/completions or /v1/chat/completions body is a 400 naming that
// field, never an escaping exception (a 500) or a value silently wrapped or
// ignored.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/api_error.h"
#include "server/protocol.h"

namespace pagoda::server {
namespace {

using Json = nlohmann::ordered_json;

// Parses `body` as a completion (or chat) request and returns the param
// named by the 400, or "<accepted>" / "<not an ApiError: ...>".
std::string rejected_param(const std::string& body, bool chat = false) {
  try {
    if (chat) {
      parse_chat_request(body);
    } else {
      parse_completion_request(body);
    }
    return "<accepted>";
  } catch (const ApiError& e) {
    if (e.status() != 400) return "<status " + std::to_string(e.status()) + ">";
    const Json err = e.body()["error"];
    return err["param"].is_string() ? err["param"].get<std::string>() : "<no param>";
  } catch (const std::exception& e) {
    return std::string("<not an ApiError: ") + e.what() + ">";
  }
}

// A completion body with `field` set to the raw JSON text `value`.
std::string completion_with(const std::string& field, const std::string& value) {
  return R"({"prompt": "hi", ")" + field + R"(": )" + value + "}";
}
std::string chat_with(const std::string& field, const std::string& value) {
  return R"({"messages": [{"role": "user", "content": "hi"}], ")" + field + R"(": )" + value + "}";
}

TEST(Protocol, ValidBodiesAreAccepted) {
  EXPECT_EQ(rejected_param(R"({"prompt": "hi", "max_tokens": 8, "temperature": 0.5,
      "top_k": 5, "seed": -3, "stop": ["a", "b"], "logit_bias": {}, "best_of": 1,
      "response_format": {"type": "text"}, "stream": true,
      "stream_options": {"include_usage": true}})"),
            "<accepted>");
  EXPECT_EQ(rejected_param(completion_with("logit_bias", "null")), "<accepted>");
  EXPECT_EQ(rejected_param(completion_with("seed", "9223372036854775807")), "<accepted>");
  EXPECT_EQ(rejected_param(chat_with("logprobs", "true"), true), "<accepted>");
}

// 1e400 does not fit a double: nlohmann's parser throws out_of_range (406),
// which used to escape as a 500 "number overflow".
TEST(Protocol, NumberOverflowIsA400NamingTheField) {
  EXPECT_EQ(rejected_param(completion_with("temperature", "1e400")), "temperature");
  EXPECT_EQ(rejected_param(completion_with("max_tokens", "1e400")), "max_tokens");
  EXPECT_EQ(rejected_param(completion_with("top_p", "-1e400")), "top_p");
  EXPECT_EQ(rejected_param(completion_with("max_tokens", "1" + std::string(400, '0'))),
            "max_tokens");
  EXPECT_EQ(rejected_param(completion_with("stream_options", R"({"include_usage": 1e999})")),
            "stream_options.include_usage");
  EXPECT_EQ(rejected_param(chat_with("messages", R"([{"role": "user", "content": 2e308}])"), true),
            "messages.content");
}

// Integers that do not fit int64 are held as uint64 by nlohmann; read as
// int64 they wrapped (top_k 18446744073709551615 became -1, "off").
TEST(Protocol, IntegersBeyondInt64AreRejectedNotWrapped) {
  for (const char* field : {"top_k", "n", "max_tokens", "max_completion_tokens", "min_tokens",
                            "priority", "seed", "logprobs", "best_of"}) {
    for (const char* v : {"18446744073709551615", "9223372036854775808"}) {
      EXPECT_EQ(rejected_param(completion_with(field, v)), field) << field << " = " << v;
    }
  }
  EXPECT_EQ(rejected_param(chat_with("top_logprobs", "18446744073709551615"), true),
            "top_logprobs");
  EXPECT_EQ(rejected_param(completion_with("stop_token_ids", "[18446744073709551615]")),
            "stop_token_ids");
  EXPECT_EQ(rejected_param(completion_with("prompt", "[1, 18446744073709551615]")), "prompt");
}

// Every numeric field, given each kind of wrong value, is a 400 naming it.
TEST(Protocol, EveryNumericFieldRejectsEveryWrongValue) {
  const std::vector<std::string> fields = {"max_tokens",
                                           "max_completion_tokens",
                                           "temperature",
                                           "top_p",
                                           "top_k",
                                           "min_p",
                                           "presence_penalty",
                                           "frequency_penalty",
                                           "repetition_penalty",
                                           "n",
                                           "min_tokens",
                                           "priority",
                                           "seed",
                                           "best_of"};
  const std::vector<std::string> values = {
      R"("x")", "1e400", "-1e400", "18446744073709551615", "-9223372036854775809", "[1]",
      "{}",     "true",  "1e300"};
  for (const std::string& f : fields) {
    for (const std::string& v : values) {
      EXPECT_EQ(rejected_param(completion_with(f, v)), f) << f << " = " << v;
      EXPECT_EQ(rejected_param(chat_with(f, v), true), f) << "chat " << f << " = " << v;
    }
  }
  EXPECT_EQ(rejected_param(completion_with("seed", "1.5")), "seed");
  for (const std::string& v : {std::string(R"("x")"), std::string("1e400"), std::string("-1"),
                               std::string("21"), std::string("18446744073709551615")}) {
    EXPECT_EQ(rejected_param(completion_with("logprobs", v)), "logprobs") << v;
  }
}

// logit_bias ({"<token id>": bias in [-100, 100]}), allowed_token_ids and
// bad_words: what is accepted reaches SamplingParams, the rest is a 400.
TEST(Protocol, LogitBiasAllowedTokenIdsAndBadWords) {
  for (const char* bad : {R"("x")", "[1]", R"({"a": 1})", R"({"-1": 1})", R"({"1.5": 1})",
                          R"({"": 1})", R"({"99999999999": 1})", R"({"1": 100.5})",
                          R"({"1": -101})", R"({"1": "5"})", R"({"1": null})", R"({"1": 1, "01": 2})"}) {
    EXPECT_EQ(rejected_param(completion_with("logit_bias", bad)), "logit_bias") << bad;
    EXPECT_EQ(rejected_param(chat_with("logit_bias", bad), true), "logit_bias") << bad;
  }
  EXPECT_EQ(rejected_param(completion_with("logit_bias", "{}")), "<accepted>");
  const GenerationRequest r = parse_chat_request(
      chat_with("logit_bias", R"({"50256": -100, "7": 2.5, "0": 100})"));
  const std::vector<std::pair<int32_t, float>> want = {{0, 100.0f}, {7, 2.5f}, {50256, -100.0f}};
  EXPECT_EQ(r.sampling.logit_bias, want);

  for (const char* bad : {"[]", "3", "[-1]", "[1.5]", R"(["1"])", "[4294967296]"}) {
    EXPECT_EQ(rejected_param(completion_with("allowed_token_ids", bad)), "allowed_token_ids")
        << bad;
  }
  EXPECT_EQ(parse_completion_request(completion_with("allowed_token_ids", "[3, 1]"))
                .sampling.allowed_token_ids,
            (std::vector<int32_t>{3, 1}));

  for (const char* bad : {R"("word")", "[1]", R"([""])", R"(["  "])", "[null]"})
    EXPECT_EQ(rejected_param(chat_with("bad_words", bad), true), "bad_words") << bad;
  EXPECT_EQ(parse_completion_request(completion_with("bad_words", R"(["cat", " dog"])")).bad_words,
            (std::vector<std::string>{"cat", " dog"}));
}

// Other fields that would change the output but are not implemented.
TEST(Protocol, UnimplementedOutputChangingFieldsAreRefused) {
  EXPECT_EQ(rejected_param(completion_with("best_of", "2")), "best_of");
  EXPECT_EQ(rejected_param(completion_with("n", "2").insert(1, R"("best_of": 2, )")),
            "<accepted>");  // best_of == n changes nothing
  EXPECT_EQ(rejected_param(chat_with("response_format", R"("json")"), true), "response_format");
  EXPECT_EQ(rejected_param(chat_with("response_format", R"({"type": "text"})"), true),
            "<accepted>");
  EXPECT_EQ(rejected_param(completion_with("suffix", R"("end")")), "suffix");
  EXPECT_EQ(rejected_param(completion_with("use_beam_search", "true")), "use_beam_search");
  EXPECT_EQ(rejected_param(chat_with("chat_template", R"("{{ 1 }}")"), true), "chat_template");
  EXPECT_EQ(rejected_param(chat_with("tool_choice", R"({"type": "function"})"), true), "tool_choice");
  EXPECT_EQ(parse_chat_request(chat_with("tool_choice", R"("required")")).tool_choice, "required");
  const GenerationRequest named =
      parse_chat_request(chat_with("tool_choice", R"({"type": "function", "function": {"name": "f"}})"));
  EXPECT_EQ(named.tool_choice, "function");
  EXPECT_EQ(named.tool_choice_function, "f");
  EXPECT_EQ(rejected_param(chat_with("tool_choice", R"("sometimes")"), true), "tool_choice");
  EXPECT_EQ(rejected_param(chat_with("tool_choice", "3"), true), "tool_choice");
  EXPECT_EQ(rejected_param(chat_with("tool_choice", R"("auto")"), true), "<accepted>");
  EXPECT_EQ(parse_chat_request(chat_with("tool_choice", R"("none")")).tool_choice, "none");
}

// vLLM's extensions: prompt_logprobs in [0, 20] (vLLM's max_logprobs), not
// with stream (its chunks carry none); return_token_ids a boolean.
TEST(Protocol, PromptLogprobsAndReturnTokenIds) {
  for (const char* bad : {"21", "-1", "1.5", "\"3\"", "true", "[1]"}) {
    EXPECT_EQ(rejected_param(completion_with("prompt_logprobs", bad)), "prompt_logprobs") << bad;
    EXPECT_EQ(rejected_param(chat_with("prompt_logprobs", bad), true), "prompt_logprobs") << bad;
  }
  EXPECT_EQ(
      rejected_param(completion_with("prompt_logprobs", "2").insert(1, R"("stream": true, )")),
      "prompt_logprobs");
  EXPECT_EQ(
      rejected_param(completion_with("prompt_logprobs", "0").insert(1, R"("stream": true, )")),
      "<accepted>");
  EXPECT_EQ(rejected_param(completion_with("return_token_ids", "1")), "return_token_ids");
  EXPECT_EQ(rejected_param(chat_with("return_token_ids", R"("yes")"), true), "return_token_ids");
  const GenerationRequest c = parse_completion_request(
      completion_with("prompt_logprobs", "20").insert(1, R"("return_token_ids": true, )"));
  EXPECT_EQ(c.prompt_logprobs, 20);
  EXPECT_TRUE(c.return_token_ids);
  const GenerationRequest chat = parse_chat_request(chat_with("prompt_logprobs", "0"));
  EXPECT_EQ(chat.prompt_logprobs, 0);
  EXPECT_FALSE(chat.return_token_ids);
  EXPECT_EQ(parse_completion_request(completion_with("n", "1")).prompt_logprobs, -1);
}

TEST(Protocol, TopLogprobsNeedsLogprobs) {
  EXPECT_EQ(rejected_param(chat_with("top_logprobs", "3"), true), "top_logprobs");
  EXPECT_EQ(rejected_param(chat_with("top_logprobs", "0"), true), "<accepted>");
  EXPECT_EQ(rejected_param(chat_with("top_logprobs", "3").insert(1, R"("logprobs": true, )"), true),
            "<accepted>");
  EXPECT_EQ(
      rejected_param(chat_with("top_logprobs", "21").insert(1, R"("logprobs": true, )"), true),
      "top_logprobs");
}

TEST(Protocol, StreamOptionsNeedStream) {
  EXPECT_EQ(rejected_param(completion_with("stream_options", R"({"include_usage": true})")),
            "stream_options");
  EXPECT_EQ(rejected_param(completion_with("stream_options", "{}")), "<accepted>");
  EXPECT_EQ(rejected_param(completion_with("stream_options", R"({"include_usage": "yes"})")
                               .insert(1, R"("stream": true, )")),
            "stream_options.include_usage");
}

// vLLM puts no cap on stop strings; clients send dozens. The bound is on
// what the per-token stop check can afford.
TEST(Protocol, ManyStopStringsAreAccepted) {
  Json stops = Json::array();
  for (int i = 0; i < 1024; ++i) stops.push_back("stop-" + std::to_string(i));
  EXPECT_EQ(rejected_param(completion_with("stop", stops.dump())), "<accepted>");
  const GenerationRequest r = parse_completion_request(completion_with("stop", stops.dump()));
  EXPECT_EQ(r.sampling.stop.size(), 1024u);
  stops.push_back("one too many");
  EXPECT_EQ(rejected_param(completion_with("stop", stops.dump())), "stop");
  EXPECT_EQ(rejected_param(completion_with("stop", Json::array({std::string(5000, 'x')}).dump())),
            "stop");
  EXPECT_EQ(rejected_param(completion_with("stop", R"([1])")), "stop");
}

TEST(Protocol, ChatPromptOptions) {
  const GenerationRequest r = parse_chat_request(
      R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Once"}],
          "add_generation_prompt": false, "continue_final_message": true,
          "add_special_tokens": true})");
  EXPECT_FALSE(r.chat_prompt.add_generation_prompt);
  EXPECT_TRUE(r.chat_prompt.continue_final_message);
  EXPECT_TRUE(r.chat_prompt.add_special_tokens);
  const GenerationRequest d = parse_chat_request(chat_with("n", "1"));
  EXPECT_TRUE(d.chat_prompt.add_generation_prompt);  // vLLM's defaults
  EXPECT_FALSE(d.chat_prompt.continue_final_message);
  EXPECT_FALSE(d.chat_prompt.add_special_tokens);
  // vLLM refuses both at once: the prompt cannot both open a new turn and
  // leave the last one open.
  EXPECT_EQ(rejected_param(chat_with("continue_final_message", "true"), true),
            "continue_final_message");
  EXPECT_EQ(rejected_param(chat_with("continue_final_message", "1"), true),
            "continue_final_message");
}

// /tokenize takes vLLM's two request shapes, with their own defaults.
TEST(Protocol, TokenizeRequests) {
  const TokenizeRequest text = parse_tokenize_request(R"({"prompt": "hi"})");
  EXPECT_FALSE(text.chat);
  EXPECT_TRUE(text.add_special_tokens);  // TokenizeCompletionRequest
  EXPECT_FALSE(text.return_token_strs);
  const TokenizeRequest chat = parse_tokenize_request(
      R"({"messages": [{"role": "user", "content": "hi"}], "return_token_strs": true})");
  EXPECT_TRUE(chat.chat);
  EXPECT_TRUE(chat.return_token_strs);
  EXPECT_TRUE(chat.chat_prompt.add_generation_prompt);  // TokenizeChatRequest
  EXPECT_FALSE(chat.chat_prompt.add_special_tokens);
  auto param = [](const std::string& body) {
    try {
      parse_tokenize_request(body);
      return std::string("<accepted>");
    } catch (const ApiError& e) {
      return e.body()["error"]["param"].get<std::string>();
    }
  };
  EXPECT_EQ(param(R"({"prompt": 3})"), "prompt");
  EXPECT_EQ(param(R"({})"), "prompt");
  EXPECT_EQ(param(R"({"messages": []})"), "messages");
  EXPECT_EQ(param(R"({"prompt": "a", "messages": [{"role": "user", "content": "b"}]})"),
            "messages");
  EXPECT_EQ(param(R"({"prompt": "a", "return_token_strs": "yes"})"), "return_token_strs");
  EXPECT_EQ(param(R"({"messages": [{"role": "user", "content": "b"}], "tools": 1e999})"), "tools");
}

// Found by fuzzing the chat endpoint: a content part whose "type" is not a
// string threw nlohmann's type_error (a 500).
TEST(Protocol, ContentPartsOfTheWrongShapeAre400s) {
  for (const char* parts :
       {R"([{"type": 5}])", R"([{"type": null, "text": "a"}])", R"([{"type": "text", "text": 5}])",
        R"([{"type": "image_url"}])", R"([5])", R"([{"text": "a"}])"}) {
    const std::string body =
        std::string(R"({"messages": [{"role": "user", "content": )") + parts + "}]}";
    EXPECT_EQ(rejected_param(body, true), "messages") << parts;
  }
  const GenerationRequest r = parse_chat_request(
      R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                                                    {"type": "text", "text": "b"}]}]})");
  EXPECT_EQ(r.chat_prompt.messages[0]["content"], "ab");
}

// Tools and the tool calls of earlier assistant turns reach the template
// only in the shapes the templates read; anything else is a 400.
TEST(Protocol, ToolsAndToolCallsHaveTheirShapes) {
  const std::string user = R"({"role": "user", "content": "Weather?"})";
  auto with_tools = [&](const std::string& tools) {
    return R"({"messages": [)" + user + R"(], "tools": )" + tools + "}";
  };
  EXPECT_EQ(rejected_param(with_tools(R"([{"type": "function", "function": {"name": "f"}}])"), true),
            "<accepted>");
  for (const char* bad : {"[1]", R"([{"type": "code"}])", R"([{"type": "function"}])",
                          R"([{"type": "function", "function": {"name": 3}}])"}) {
    EXPECT_EQ(rejected_param(with_tools(bad), true), "tools") << bad;
  }
  auto with_calls = [&](const std::string& calls) {
    return R"({"messages": [)" + user + R"(, {"role": "assistant", "content": null, "tool_calls": )" +
           calls + R"(}, {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]})";
  };
  EXPECT_EQ(rejected_param(with_calls(R"([{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}])"), true),
            "<accepted>");
  for (const char* bad : {"{}", "[1]", R"([{"function": {"name": "f"}}])",
                          R"([{"function": {"name": "f", "arguments": 3}}])"}) {
    EXPECT_EQ(rejected_param(with_calls(bad), true), "messages") << bad;
  }
}

}  // namespace
}  // namespace pagoda::server

namespace pagoda::server {
namespace {

// Structured outputs: each form reaches the request as its spec, and at
// most one may be given; malformed forms are a 400 naming the field.
TEST(Protocol, StructuredOutputForms) {
  using Kind = structured::OutputSpec::Kind;
  struct Form {
    const char* field;
    const char* value;
    Kind kind;
    const char* spec;
  };
  for (const Form& f : std::vector<Form>{
           {"response_format", R"({"type": "json_object"})", Kind::JsonObject, ""},
           {"response_format", R"({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "integer"}, "strict": true}})",
            Kind::JsonSchema, R"({"type":"integer"})"},
           {"guided_json", R"({"type": "string"})", Kind::JsonSchema, R"({"type":"string"})"},
           {"guided_regex", R"("[a-z]+")", Kind::Regex, "[a-z]+"},
           {"guided_choice", R"(["a", "b"])", Kind::Choice, R"(["a","b"])"},
           {"guided_grammar", R"("root ::= \"x\"")", Kind::Grammar, R"(root ::= "x")"},
           {"structured_outputs", R"({"json": {"type": "null"}})", Kind::JsonSchema, R"({"type":"null"})"},
           {"structured_outputs", R"({"regex": "a|b"})", Kind::Regex, "a|b"},
           {"structured_outputs", R"({"choice": ["x"]})", Kind::Choice, R"(["x"])"},
           {"structured_outputs", R"({"json_object": true})", Kind::JsonObject, ""}}) {
    const GenerationRequest r = parse_chat_request(chat_with(f.field, f.value));
    EXPECT_EQ(r.structured_output.kind, f.kind) << f.field << " " << f.value;
    EXPECT_EQ(r.structured_output.value, f.spec) << f.field << " " << f.value;
    EXPECT_EQ(parse_completion_request(completion_with(f.field, f.value)).structured_output.kind, f.kind);
  }
  EXPECT_TRUE(parse_chat_request(chat_with("response_format", R"({"type": "text"})")).structured_output.empty());
  EXPECT_EQ(rejected_param(chat_with("response_format", R"({"type": "json_schema"})"), true), "response_format");
  EXPECT_EQ(rejected_param(chat_with("response_format", R"({"type": "structural_tag"})"), true), "response_format");
  EXPECT_EQ(rejected_param(chat_with("guided_choice", "[]"), true), "guided_choice");
  EXPECT_EQ(rejected_param(chat_with("guided_regex", "3"), true), "guided_regex");
  EXPECT_EQ(rejected_param(chat_with("structured_outputs", R"({"xml": "x"})"), true), "structured_outputs.xml");
  EXPECT_EQ(rejected_param(chat_with("guided_regex", R"("a")").insert(1, R"("guided_choice": ["a"], )"), true),
            "guided_choice");
}

}  // namespace
}  // namespace pagoda::server
