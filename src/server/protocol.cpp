#include "server/protocol.h"

#include <cmath>

#include "core/error.h"
#include "server/api_error.h"
#include "tokenizer/utf8.h"

namespace pagoda::server {

namespace {

using Json = nlohmann::ordered_json;

class Reader {
 public:
  explicit Reader(const Json& j) : j_(j) {}

  bool has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }
  const Json& at(const char* key) const { return j_[key]; }

  void number(const char* key, float& out, double lo, double hi) const {
    if (!has(key)) return;
    if (!j_[key].is_number()) throw bad_request(std::string(key) + " must be a number", key);
    const double v = j_[key].get<double>();
    if (!(v >= lo && v <= hi)) {
      throw bad_request(std::string(key) + " must be in [" + fmt(lo) + ", " + fmt(hi) + "], got " +
                            j_[key].dump(),
                        key);
    }
    out = static_cast<float>(v);
  }
  void integer(const char* key, int& out, int64_t lo, int64_t hi) const {
    if (!has(key)) return;
    if (!j_[key].is_number_integer())
      throw bad_request(std::string(key) + " must be an integer", key);
    const auto v = j_[key].get<int64_t>();
    if (v < lo || v > hi) {
      throw bad_request(std::string(key) + " must be in [" + std::to_string(lo) + ", " +
                            std::to_string(hi) + "], got " + std::to_string(v),
                        key);
    }
    out = static_cast<int>(v);
  }
  void boolean(const char* key, bool& out) const {
    if (!has(key)) return;
    if (!j_[key].is_boolean()) throw bad_request(std::string(key) + " must be true or false", key);
    out = j_[key].get<bool>();
  }
  void string(const char* key, std::string& out) const {
    if (!has(key)) return;
    if (!j_[key].is_string()) throw bad_request(std::string(key) + " must be a string", key);
    out = j_[key].get<std::string>();
  }

 private:
  static std::string fmt(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
  }
  const Json& j_;
};

std::vector<int32_t> token_list(const Json& j, const char* field) {
  std::vector<int32_t> ids;
  for (const auto& v : j) {
    if (!v.is_number_integer())
      throw bad_request(std::string(field) + " must hold only integers", field);
    const auto id = v.get<int64_t>();
    if (id < 0 || id > INT32_MAX)
      throw bad_request("token id " + std::to_string(id) + " is out of range", field);
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

// Fields shared by both endpoints.
void parse_common(const Json& j, GenerationRequest& r) {
  const Reader f(j);
  SamplingParams& s = r.sampling;
  f.string("model", r.model);
  if (f.has("max_tokens") || f.has("max_completion_tokens")) {
    int v = 0;
    f.integer(f.has("max_completion_tokens") ? "max_completion_tokens" : "max_tokens", v, 1,
              INT32_MAX);
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
    if (!j["seed"].is_number_integer()) throw bad_request("seed must be an integer", "seed");
    s.seed = static_cast<uint64_t>(j["seed"].get<int64_t>());
  }
  if (f.has("stop")) {
    const Json& stop = j["stop"];
    if (stop.is_string()) {
      s.stop = {stop.get<std::string>()};
    } else if (stop.is_array() && stop.size() <= 16) {
      for (const auto& v : stop) {
        if (!v.is_string() || v.get<std::string>().empty())
          throw bad_request("stop must hold non-empty strings", "stop");
        s.stop.push_back(v.get<std::string>());
      }
    } else {
      throw bad_request("stop must be a string or a list of at most 16 strings", "stop");
    }
    if (stop.is_string() && stop.get<std::string>().empty())
      throw bad_request("stop must not be empty", "stop");
  }
  if (f.has("stop_token_ids")) {
    if (!j["stop_token_ids"].is_array())
      throw bad_request("stop_token_ids must be a list of integers", "stop_token_ids");
    s.stop_token_ids = token_list(j["stop_token_ids"], "stop_token_ids");
  }
  if (f.has("stream_options")) {
    const Json& so = j["stream_options"];
    if (!so.is_object()) throw bad_request("stream_options must be an object", "stream_options");
    Reader(so).boolean("include_usage", r.include_usage);
  }
}

}  // namespace

Json parse_json_object(const std::string& body) {
  if (utf8::lossy(body) != body) throw bad_request("the body is not valid UTF-8");
  Json j;
  try {
    j = Json::parse(body);
  } catch (const Json::parse_error& e) {
    throw bad_request(std::string("the body is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) throw bad_request("the body must be a JSON object");
  return j;
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
  r.messages = j["messages"];
  // Content given as a list of {"type": "text", "text": ...} parts is joined.
  for (auto& m : r.messages) {
    if (m.contains("content") && m["content"].is_array()) {
      std::string text;
      for (const auto& part : m["content"]) {
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
            !part["text"].is_string()) {
          throw bad_request("only text content parts are supported", "messages");
        }
        text += part["text"].get<std::string>();
      }
      m["content"] = text;
    }
  }
  if (j.contains("tools") && !j["tools"].is_null()) {
    if (!j["tools"].is_array()) throw bad_request("tools must be a list", "tools");
    r.tools = j["tools"];
  }
  const Reader f(j);
  f.boolean("add_generation_prompt", r.add_generation_prompt);
  if (f.has("chat_template_kwargs")) {
    if (!j["chat_template_kwargs"].is_object()) {
      throw bad_request("chat_template_kwargs must be an object", "chat_template_kwargs");
    }
    r.chat_template_kwargs = j["chat_template_kwargs"];
  }
  bool logprobs = false;
  f.boolean("logprobs", logprobs);
  if (logprobs) {
    r.top_logprobs = 0;
    f.integer("top_logprobs", r.top_logprobs, 0, 20);
  }
  return r;
}

}  // namespace pagoda::server
