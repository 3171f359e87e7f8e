#include "server/protocol.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/error.h"
#include "server/api_error.h"
#include "tokenizer/utf8.h"

namespace pagoda::server {

namespace {

using Json = nlohmann::ordered_json;

// Stop strings: vLLM has no cap and clients send dozens, but every stop
// string is searched after every generated token (StopChecker::find and
// hold_back, the latter quadratic in a string's length at worst), so the
// number, each length and the total are bounded far beyond real use.
constexpr size_t kMaxStopStrings = 1024;
constexpr size_t kMaxStopStringBytes = 1024;
constexpr size_t kMaxStopTotalBytes = 64 * 1024;

// The JSON integer as int64, or nullopt when it does not fit: nlohmann
// holds integers above INT64_MAX as uint64, and reading one as int64 wraps
// it (18446744073709551615 would become -1).
std::optional<int64_t> as_int64(const Json& v) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  return v.get<int64_t>();
}

class Reader {
 public:
  explicit Reader(const Json& j, std::string prefix = "") : j_(j), prefix_(std::move(prefix)) {}

  bool has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }

  // A finite number in [lo, hi] (JSON cannot carry inf or NaN, and a
  // literal too large for a double is refused by parse_json_object).
  void number(const char* key, float& out, double lo, double hi) const {
    if (!has(key)) return;
    if (!j_[key].is_number()) throw error(key, "must be a number");
    const double v = j_[key].get<double>();
    if (!(v >= lo && v <= hi)) {
      throw error(key, "must be in [" + fmt(lo) + ", " + fmt(hi) + "], got " + j_[key].dump());
    }
    out = static_cast<float>(v);
  }
  void integer(const char* key, int64_t& out, int64_t lo, int64_t hi) const {
    if (!has(key)) return;
    if (!j_[key].is_number_integer()) throw error(key, "must be an integer");
    const std::optional<int64_t> v = as_int64(j_[key]);
    if (!v || *v < lo || *v > hi) {
      throw error(key, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                           j_[key].dump());
    }
    out = *v;
  }
  void integer(const char* key, int& out, int64_t lo, int64_t hi) const {
    int64_t v = out;
    integer(key, v, lo, hi);
    out = static_cast<int>(v);
  }
  void boolean(const char* key, bool& out) const {
    if (!has(key)) return;
    if (!j_[key].is_boolean()) throw error(key, "must be true or false");
    out = j_[key].get<bool>();
  }
  void string(const char* key, std::string& out) const {
    if (!has(key)) return;
    if (!j_[key].is_string()) throw error(key, "must be a string");
    out = j_[key].get<std::string>();
  }
  ApiError error(const char* key, const std::string& what) const {
    const std::string name = prefix_ + key;
    return bad_request(name + " " + what, name);
  }

 private:
  static std::string fmt(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
  }
  const Json& j_;
  std::string prefix_;
};

std::vector<int32_t> token_list(const Json& j, const char* field) {
  std::vector<int32_t> ids;
  for (const auto& v : j) {
    if (!v.is_number_integer())
      throw bad_request(std::string(field) + " must hold only integers", field);
    const std::optional<int64_t> id = as_int64(v);
    if (!id || *id < 0 || *id > INT32_MAX)
      throw bad_request("token id " + v.dump() + " is out of range", field);
    ids.push_back(static_cast<int32_t>(*id));
  }
  return ids;
}

void parse_stop(const Json& stop, std::vector<std::string>& out) {
  if (stop.is_string()) {
    if (stop.get<std::string>().empty()) throw bad_request("stop must not be empty", "stop");
    out = {stop.get<std::string>()};
  } else if (stop.is_array()) {
    if (stop.size() > kMaxStopStrings) {
      throw bad_request("stop holds " + std::to_string(stop.size()) + " strings; at most " +
                            std::to_string(kMaxStopStrings) + " are allowed",
                        "stop");
    }
    for (const auto& v : stop) {
      if (!v.is_string() || v.get<std::string>().empty())
        throw bad_request("stop must hold non-empty strings", "stop");
      out.push_back(v.get<std::string>());
    }
  } else {
    throw bad_request("stop must be a string or a list of strings", "stop");
  }
  size_t total = 0;
  for (const std::string& s : out) {
    if (s.size() > kMaxStopStringBytes) {
      throw bad_request(
          "a stop string may be at most " + std::to_string(kMaxStopStringBytes) + " bytes long",
          "stop");
    }
    total += s.size();
  }
  if (total > kMaxStopTotalBytes) {
    throw bad_request(
        "the stop strings may total at most " + std::to_string(kMaxStopTotalBytes) + " bytes",
        "stop");
  }
}

// OpenAI's logit_bias: {"<token id>": bias in [-100, 100]}. OpenAI refuses
// a bias out of range (vLLM clamps it); a refusal tells the client its
// value did not do what it asked.
std::vector<std::pair<int32_t, float>> parse_logit_bias(const Json& j) {
  if (!j.is_object())
    throw bad_request("logit_bias must be an object mapping token ids to biases", "logit_bias");
  std::vector<std::pair<int32_t, float>> out;
  for (const auto& [key, value] : j.items()) {
    int64_t id = -1;
    const bool digits = !key.empty() && key.size() <= 10 &&
                        key.find_first_not_of("0123456789") == std::string::npos;
    if (digits) id = std::stoll(key);
    if (!digits || id > INT32_MAX) {
      throw bad_request("logit_bias keys must be token ids (non-negative integers), got \"" +
                            utf8::lossy(key) + "\"",
                        "logit_bias");
    }
    if (!value.is_number() || !(value.get<double>() >= -100 && value.get<double>() <= 100)) {
      throw bad_request("logit_bias values must be numbers in [-100, 100], got " + value.dump() +
                            " for token " + key,
                        "logit_bias");
    }
    out.emplace_back(static_cast<int32_t>(id), value.get<float>());
  }
  // "7" and "007" are the same token: one bias each, as the client meant.
  std::sort(out.begin(), out.end());
  for (size_t i = 1; i < out.size(); ++i) {
    if (out[i].first == out[i - 1].first) {
      throw bad_request("logit_bias names token " + std::to_string(out[i].first) + " twice",
                        "logit_bias");
    }
  }
  return out;
}

// Fields of the OpenAI / vLLM APIs that would change what is generated but
// that Pagoda does not implement: answering without them would silently
// return something other than what was asked, so each non-default value is
// a 400 naming the field. Defaults (null, {}, "text", ...) are accepted,
// since clients often send them.
void refuse_unimplemented(const Json& j, int n) {
  const Reader f(j);
  if (f.has("best_of")) {
    int64_t best_of = n;
    f.integer("best_of", best_of, 1, INT32_MAX);
    // best_of == n returns every candidate, which is plain sampling.
    if (best_of != n) throw f.error("best_of", "is not supported (only best_of equal to n)");
  }
  if (f.has("suffix")) {
    if (!j["suffix"].is_string()) throw f.error("suffix", "must be a string");
    if (!j["suffix"].get<std::string>().empty()) throw f.error("suffix", "is not supported");
  }
  if (f.has("use_beam_search")) {
    bool beam = false;
    f.boolean("use_beam_search", beam);
    if (beam) throw f.error("use_beam_search", "is not supported");
  }
  // A template sent with the request (vLLM refuses one unless started
  // with --trust-request-chat-template).
  if (f.has("chat_template")) throw f.error("chat_template", "is not supported");
}

// A JSON schema given as an object (or boolean) or as JSON text.
std::string schema_text(const Json& v, const std::string& field) {
  if (v.is_object() || v.is_boolean()) return v.dump();
  if (v.is_string()) return v.get<std::string>();
  throw bad_request(field + " must be a JSON schema (an object)", field);
}

std::string choice_text(const Json& v, const std::string& field) {
  if (!v.is_array() || v.empty())
    throw bad_request(field + " must be a non-empty list of strings", field);
  for (const auto& c : v)
    if (!c.is_string()) throw bad_request(field + " must be a non-empty list of strings", field);
  return v.dump();
}

std::string string_field(const Json& v, const std::string& field) {
  if (!v.is_string() || v.get<std::string>().empty())
    throw bad_request(field + " must be a non-empty string", field);
  return v.get<std::string>();
}

// Structured outputs: OpenAI's response_format, vLLM's structured_outputs
// and its older guided_json / guided_regex / guided_choice /
// guided_grammar. At most one may constrain a request.
void parse_structured_output(const Json& j, GenerationRequest& r) {
  using Kind = structured::OutputSpec::Kind;
  const Reader f(j);
  auto set = [&](Kind kind, std::string value, const std::string& field) {
    if (!r.structured_output.empty()) {
      throw bad_request("only one output constraint may be given; got " + r.structured_field +
                            " and " + field,
                        field);
    }
    r.structured_output = {kind, std::move(value)};
    r.structured_field = field;
  };
  if (f.has("response_format")) {
    const Json& rf = j["response_format"];
    if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string())
      throw f.error("response_format", "must be an object with a string type");
    const std::string type = rf["type"].get<std::string>();
    if (type == "json_object") {
      set(Kind::JsonObject, "", "response_format");
    } else if (type == "json_schema") {
      if (!rf.contains("json_schema") || !rf["json_schema"].is_object())
        throw f.error("response_format", "of type json_schema needs a json_schema object");
      const Json& js = rf["json_schema"];
      // OpenAI names the field "schema"; some clients send "json_schema".
      const char* key = js.contains("schema") ? "schema" : "json_schema";
      if (!js.contains(key))
        throw bad_request("response_format.json_schema.schema is required",
                          "response_format.json_schema.schema");
      set(Kind::JsonSchema, schema_text(js[key], "response_format.json_schema.schema"),
          "response_format");
    } else if (type != "text") {
      throw f.error("response_format", "type " + rf["type"].dump() +
                                           " is not supported (text, json_object or json_schema)");
    }
  }
  if (f.has("guided_json")) set(Kind::JsonSchema, schema_text(j["guided_json"], "guided_json"), "guided_json");
  if (f.has("guided_regex")) set(Kind::Regex, string_field(j["guided_regex"], "guided_regex"), "guided_regex");
  if (f.has("guided_choice"))
    set(Kind::Choice, choice_text(j["guided_choice"], "guided_choice"), "guided_choice");
  if (f.has("guided_grammar"))
    set(Kind::Grammar, string_field(j["guided_grammar"], "guided_grammar"), "guided_grammar");
  if (f.has("structured_outputs")) {
    const Json& so = j["structured_outputs"];
    if (!so.is_object()) throw f.error("structured_outputs", "must be an object");
    for (const auto& [key, v] : so.items()) {
      if (v.is_null()) continue;
      const std::string field = "structured_outputs." + key;
      if (key == "json") set(Kind::JsonSchema, schema_text(v, field), field);
      else if (key == "regex") set(Kind::Regex, string_field(v, field), field);
      else if (key == "choice") set(Kind::Choice, choice_text(v, field), field);
      else if (key == "grammar") set(Kind::Grammar, string_field(v, field), field);
      else if (key == "json_object") {
        if (!v.is_boolean()) throw bad_request(field + " must be true or false", field);
        if (v.get<bool>()) set(Kind::JsonObject, "", field);
      } else {
        throw bad_request(field + " is not supported (json, regex, choice, grammar or json_object)",
                          field);
      }
    }
  }
}

// Fields shared by both endpoints.
void parse_common(const Json& j, GenerationRequest& r) {
  const Reader f(j);
  SamplingParams& s = r.sampling;
  f.string("model", r.model);
  if (f.has("max_tokens") || f.has("max_completion_tokens")) {
    int v = 0;
    // Both are checked, the newer name wins (OpenAI renamed max_tokens).
    f.integer("max_tokens", v, 1, INT32_MAX);
    f.integer("max_completion_tokens", v, 1, INT32_MAX);
    r.max_tokens = v;
  }
  f.number("temperature", s.temperature, 0, 100);
  f.number("top_p", s.top_p, 1e-9, 1);
  f.integer("top_k", s.top_k, -1, INT32_MAX);
  f.number("min_p", s.min_p, 0, 1);
  f.number("presence_penalty", s.presence_penalty, -2, 2);
  f.number("frequency_penalty", s.frequency_penalty, -2, 2);
  f.number("repetition_penalty", s.repetition_penalty, 1e-6, 100);
  f.integer("n", r.n, 1, 16);
  f.integer("min_tokens", s.min_tokens, 0, INT32_MAX);
  f.boolean("ignore_eos", s.ignore_eos);
  f.integer("priority", s.priority, INT32_MIN, INT32_MAX);
  f.boolean("skip_special_tokens", s.skip_special_tokens);
  f.boolean("stream", r.stream);
  if (f.has("seed")) {
    // vLLM's range; a negative seed is as good as any.
    int64_t seed = 0;
    f.integer("seed", seed, std::numeric_limits<int64_t>::min(),
              std::numeric_limits<int64_t>::max());
    s.seed = static_cast<uint64_t>(seed);
  }
  if (f.has("stop")) parse_stop(j["stop"], s.stop);
  if (f.has("stop_token_ids")) {
    if (!j["stop_token_ids"].is_array())
      throw bad_request("stop_token_ids must be a list of integers", "stop_token_ids");
    s.stop_token_ids = token_list(j["stop_token_ids"], "stop_token_ids");
  }
  if (f.has("stream_options")) {
    const Json& so = j["stream_options"];
    if (!so.is_object()) throw bad_request("stream_options must be an object", "stream_options");
    Reader(so, "stream_options.").boolean("include_usage", r.include_usage);
    // As vLLM: the options would otherwise be silently ignored ({} is no
    // option at all).
    if (!r.stream && !so.empty())
      throw bad_request("stream_options is only allowed with stream: true", "stream_options");
  }
  if (f.has("logit_bias")) s.logit_bias = parse_logit_bias(j["logit_bias"]);
  if (f.has("allowed_token_ids")) {
    if (!j["allowed_token_ids"].is_array() || j["allowed_token_ids"].empty())
      throw f.error("allowed_token_ids", "must be a non-empty list of token ids");
    s.allowed_token_ids = token_list(j["allowed_token_ids"], "allowed_token_ids");
  }
  if (f.has("bad_words")) {
    const Json& words = j["bad_words"];
    if (!words.is_array()) throw f.error("bad_words", "must be a list of strings");
    for (const auto& w : words) {
      // A word of only spaces would tokenize to nothing (vLLM strips the
      // leading spaces) and ban nothing: refused rather than ignored.
      if (!w.is_string() || w.get<std::string>().find_first_not_of(' ') == std::string::npos)
        throw f.error("bad_words", "must hold non-empty strings");
      r.bad_words.push_back(w.get<std::string>());
    }
  }
  f.boolean("return_token_ids", r.return_token_ids);
  // vLLM's range (its default max_logprobs is 20, which also rules out -1,
  // "the whole vocabulary"). As in vLLM, streamed chunks carry no prompt
  // logprobs, so asking for some with stream is refused rather than ignored
  // (0 asks for none beyond the prompt token's own and is accepted).
  f.integer("prompt_logprobs", r.prompt_logprobs, 0, 20);
  if (r.stream && r.prompt_logprobs > 0)
    throw f.error("prompt_logprobs", "is not available with stream: true");
  refuse_unimplemented(j, r.n);
  parse_structured_output(j, r);
}

// Names the field a parse error happened in, as a dotted path of object
// keys ("stream_options.include_usage"): nlohmann's own error names only
// the offending text.
class KeyPathTracker {
 public:
  bool operator()(int depth, nlohmann::json::parse_event_t event, Json& parsed) {
    if (event == nlohmann::json::parse_event_t::key) {
      // A key event's depth counts its enclosing object and every container
      // around that: keys_[d] is the key open at depth d + 1.
      keys_.resize(static_cast<size_t>(depth > 0 ? depth - 1 : 0));
      keys_.push_back(parsed.get<std::string>());
    }
    return true;
  }
  std::string path() const {
    std::string p;
    for (const std::string& k : keys_) {
      if (k.empty()) continue;  // an array level
      if (!p.empty()) p += '.';
      p += k;
    }
    return p;
  }

 private:
  std::vector<std::string> keys_;
};

}  // namespace

Json parse_json_object(const std::string& body) {
  if (utf8::lossy(body) != body) throw bad_request("the body is not valid UTF-8");
  Json j;
  KeyPathTracker keys;
  try {
    j = Json::parse(body, std::ref(keys));
  } catch (const Json::parse_error& e) {
    throw bad_request(std::string("the body is not valid JSON: ") + e.what());
  } catch (const Json::out_of_range& e) {
    // A number beyond a double's range (1e400): strtod gives inf, which
    // nlohmann refuses (406 "number overflow").
    const std::string field = keys.path();
    throw bad_request((field.empty() ? std::string("a number") : field) +
                          " is too large for a number: " + e.what(),
                      field);
  }
  if (!j.is_object()) throw bad_request("the body must be a JSON object");
  return j;
}

ChatPrompt parse_chat_prompt(const Json& j) {
  ChatPrompt p;
  if (!j.contains("messages") || !j["messages"].is_array() || j["messages"].empty()) {
    throw bad_request("messages must be a non-empty list", "messages");
  }
  for (const auto& m : j["messages"]) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
      throw bad_request("every message needs a string role", "messages");
    }
    if (m.contains("content") && !m["content"].is_null() && !m["content"].is_string() &&
        !m["content"].is_array()) {
      throw bad_request("message content must be a string or a list of parts", "messages");
    }
  }
  p.messages = j["messages"];
  // Content given as a list of {"type": "text", "text": ...} parts is joined.
  for (auto& m : p.messages) {
    // An assistant turn that only called tools has content null (as the
    // OpenAI API returns it); templates test it with `in`, so it renders
    // as "", as vLLM's message parsing makes it.
    if (m.contains("content") && m["content"].is_null()) m["content"] = "";
    if (m.contains("content") && m["content"].is_array()) {
      std::string text;
      for (const auto& part : m["content"]) {
        // (value("type", "") would throw, a 500, for a non-string type.)
        if (!part.is_object() || !part.contains("type") || part["type"] != "text" ||
            !part.contains("text") || !part["text"].is_string()) {
          throw bad_request("only text content parts are supported", "messages");
        }
        text += part["text"].get<std::string>();
      }
      m["content"] = text;
    }
  }
  for (const auto& m : j["messages"]) {
    if (!m.contains("tool_calls") || m["tool_calls"].is_null()) continue;
    // The templates index these without checks; a wrong shape would fail
    // deep in rendering with a message naming no field.
    bool ok = m["tool_calls"].is_array();
    for (const auto& call : ok ? m["tool_calls"] : Json::array()) {
      ok = ok && call.is_object() && call.contains("function") && call["function"].is_object() &&
           call["function"].contains("name") && call["function"]["name"].is_string() &&
           call["function"].contains("arguments") &&
           (call["function"]["arguments"].is_string() || call["function"]["arguments"].is_object());
    }
    if (!ok) {
      throw bad_request(
          "a message's tool_calls must be a list of {\"id\", \"type\": \"function\", \"function\": "
          "{\"name\": string, \"arguments\": string}}",
          "messages");
    }
  }
  if (j.contains("tools") && !j["tools"].is_null()) {
    if (!j["tools"].is_array()) throw bad_request("tools must be a list", "tools");
    for (const auto& tool : j["tools"]) {
      if (!tool.is_object() || tool.value("type", Json()) != "function" ||
          !tool.contains("function") || !tool["function"].is_object() ||
          !tool["function"].contains("name") || !tool["function"]["name"].is_string()) {
        throw bad_request(
            "each tool must be {\"type\": \"function\", \"function\": {\"name\": string, ...}}",
            "tools");
      }
    }
    p.tools = j["tools"];
  }
  const Reader f(j);
  f.boolean("add_generation_prompt", p.add_generation_prompt);
  f.boolean("continue_final_message", p.continue_final_message);
  f.boolean("add_special_tokens", p.add_special_tokens);
  // vLLM refuses both: a prompt cannot open the assistant's next turn and
  // leave the last message open at once.
  if (p.continue_final_message && p.add_generation_prompt) {
    throw bad_request(
        "continue_final_message and add_generation_prompt cannot both be true (set "
        "add_generation_prompt to false)",
        "continue_final_message");
  }
  if (f.has("chat_template_kwargs")) {
    if (!j["chat_template_kwargs"].is_object()) {
      throw bad_request("chat_template_kwargs must be an object", "chat_template_kwargs");
    }
    p.chat_template_kwargs = j["chat_template_kwargs"];
  }
  return p;
}

TokenizeRequest parse_tokenize_request(const std::string& body) {
  const Json j = parse_json_object(body);
  TokenizeRequest r;
  const Reader f(j);
  f.string("model", r.model);
  f.boolean("return_token_strs", r.return_token_strs);
  const bool has_prompt = j.contains("prompt");
  const bool has_messages = j.contains("messages");
  if (has_prompt && has_messages)
    throw bad_request("give either prompt or messages, not both", "messages");
  if (has_messages) {
    r.chat = true;
    r.chat_prompt = parse_chat_prompt(j);
    if (f.has("chat_template")) throw f.error("chat_template", "is not supported");
    return r;
  }
  if (!has_prompt || !j["prompt"].is_string())
    throw bad_request("prompt must be a string (or give messages)", "prompt");
  r.prompt = j["prompt"].get<std::string>();
  f.boolean("add_special_tokens", r.add_special_tokens);
  return r;
}

GenerationRequest parse_completion_request(const std::string& body) {
  const Json j = parse_json_object(body);
  GenerationRequest r;
  parse_common(j, r);
  if (!j.contains("prompt")) throw bad_request("prompt is required", "prompt");
  const Json& p = j["prompt"];
  if (p.is_string()) {
    r.text_prompts.push_back(p.get<std::string>());
  } else if (p.is_array() && !p.empty() && p[0].is_string()) {
    for (const auto& v : p) {
      if (!v.is_string()) throw bad_request("prompt lists must hold only strings", "prompt");
      r.text_prompts.push_back(v.get<std::string>());
    }
  } else if (p.is_array() && !p.empty() && p[0].is_number_integer()) {
    r.id_prompts.push_back(token_list(p, "prompt"));
  } else if (p.is_array() && !p.empty() && p[0].is_array()) {
    for (const auto& v : p) {
      if (!v.is_array() || v.empty())
        throw bad_request("prompt must be a list of token-id lists", "prompt");
      r.id_prompts.push_back(token_list(v, "prompt"));
    }
  } else {
    throw bad_request("prompt must be a string, a list of strings or token ids, and not empty",
                      "prompt");
  }
  if (r.text_prompts.size() + r.id_prompts.size() > 64)
    throw bad_request("at most 64 prompts per request", "prompt");
  const Reader f(j);
  f.boolean("echo", r.echo);
  f.boolean("add_special_tokens", r.add_special_tokens);
  if (f.has("logprobs")) {
    if (j["logprobs"].is_boolean()) {
      r.top_logprobs = j["logprobs"].get<bool>() ? 0 : -1;
    } else {
      f.integer("logprobs", r.top_logprobs, 0, 20);
    }
  }
  return r;
}

GenerationRequest parse_chat_request(const std::string& body) {
  const Json j = parse_json_object(body);
  GenerationRequest r;
  r.chat = true;
  parse_common(j, r);
  r.chat_prompt = parse_chat_prompt(j);
  const Reader f(j);
  if (f.has("tool_choice")) {
    const Json& tc = j["tool_choice"];
    if (tc == "none" || tc == "auto") {
      r.tool_choice = tc.get<std::string>();
    } else if (tc == "required") {
      r.tool_choice = "required";
    } else if (tc.is_object()) {
      if (!tc.contains("type") || tc["type"] != "function" || !tc.contains("function") ||
          !tc["function"].is_object() || !tc["function"].contains("name") ||
          !tc["function"]["name"].is_string()) {
        throw f.error("tool_choice",
                      "naming a function must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
      }
      r.tool_choice = "function";
      r.tool_choice_function = tc["function"]["name"].get<std::string>();
    } else {
      throw f.error("tool_choice",
                    "must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", ...}");
    }
  }
  bool logprobs = false;
  f.boolean("logprobs", logprobs);
  int top = 0;
  f.integer("top_logprobs", top, 0, 20);
  // As vLLM: top_logprobs > 0 alone would be silently ignored (0, which
  // some clients send by default, asks for nothing).
  if (top > 0 && !logprobs) throw f.error("top_logprobs", "needs logprobs: true");
  if (logprobs) r.top_logprobs = top;
  return r;
}

}  // namespace pagoda::server
