#include "models/config.h"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace pagoda {

namespace {

using nlohmann::json;

json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw_input_error("{}: cannot open (is this a model directory?)", path);
  try {
    return json::parse(in);
  } catch (const json::parse_error& e) {
    throw_input_error("{}: invalid JSON: {}", path, e.what());
  }
}

// Typed field readers: a present field of the wrong type is an error that
// names the field and shows the value; a missing or null field keeps `out`.
class Fields {
 public:
  Fields(const json& j, std::string path) : j_(j), path_(std::move(path)) {}

  bool has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }

  [[noreturn]] void fail(const char* key, const char* what) const {
    throw_input_error("{}: field '{}' must be {}, got {}", path_, key, what, j_[key].dump());
  }

  void positive_int(const char* key, int64_t& out, bool required) const {
    if (!has(key)) {
      if (required) throw_input_error("{}: missing required field '{}'", path_, key);
      return;
    }
    if (!j_[key].is_number_integer() || j_[key].get<int64_t>() <= 0) fail(key, "a positive integer");
    out = j_[key].get<int64_t>();
  }
  void number(const char* key, double& out) const {
    if (!has(key)) return;
    if (!j_[key].is_number()) fail(key, "a number");
    out = j_[key].get<double>();
  }
  void boolean(const char* key, bool& out) const {
    if (!has(key)) return;
    if (!j_[key].is_boolean()) fail(key, "true or false");
    out = j_[key].get<bool>();
  }
  void string(const char* key, std::string& out) const {
    if (!has(key)) return;
    if (!j_[key].is_string()) fail(key, "a string");
    out = j_[key].get<std::string>();
  }
  // An int or a list of ints (eos_token_id).
  void int_list(const char* key, std::vector<int32_t>& out) const {
    if (!has(key)) return;
    const json& v = j_[key];
    std::vector<int32_t> ids;
    if (v.is_number_integer()) {
      ids.push_back(v.get<int32_t>());
    } else if (v.is_array()) {
      for (const auto& e : v) {
        if (!e.is_number_integer()) fail(key, "an integer or a list of integers");
        ids.push_back(e.get<int32_t>());
      }
    } else {
      fail(key, "an integer or a list of integers");
    }
    out = ids;
  }
  void optional_int(const char* key, std::optional<int32_t>& out) const {
    if (!has(key)) return;
    if (!j_[key].is_number_integer()) fail(key, "an integer");
    out = j_[key].get<int32_t>();
  }

 private:
  const json& j_;
  std::string path_;
};

RopeScaling parse_rope_scaling(const json& j, const std::string& path) {
  RopeScaling r;
  if (j.is_null()) return r;
  if (!j.is_object()) throw_input_error("{}: field 'rope_scaling' must be an object or null", path);
  const Fields f(j, path + " rope_scaling");
  if (f.has("rope_type")) {
    f.string("rope_type", r.type);
  } else {
    f.string("type", r.type);
  }
  if (r.type != "default" && r.type != "linear" && r.type != "llama3") {
    throw_input_error("{}: rope_scaling type '{}' is not supported (default, linear, llama3)", path,
                      r.type);
  }
  f.number("factor", r.factor);
  f.number("low_freq_factor", r.low_freq_factor);
  f.number("high_freq_factor", r.high_freq_factor);
  f.positive_int("original_max_position_embeddings", r.original_max_position_embeddings,
                 r.type == "llama3");
  if (r.factor <= 0) throw_input_error("{}: rope_scaling factor must be positive", path);
  if (r.type == "llama3" && r.high_freq_factor <= r.low_freq_factor) {
    throw_input_error("{}: rope_scaling high_freq_factor must exceed low_freq_factor", path);
  }
  return r;
}

void parse_sliding_window(const json& j, const Fields& f, const std::string& path, ModelConfig& c) {
  int64_t window = 0;
  if (f.has("sliding_window")) f.positive_int("sliding_window", window, false);
  c.layer_sliding_window.assign(c.num_hidden_layers, 0);
  if (f.has("layer_types")) {
    const json& types = j["layer_types"];
    if (!types.is_array() || static_cast<int64_t>(types.size()) != c.num_hidden_layers) {
      throw_input_error("{}: field 'layer_types' must be a list of {} strings", path,
                        c.num_hidden_layers);
    }
    for (size_t i = 0; i < types.size(); ++i) {
      const std::string t = types[i].is_string() ? types[i].get<std::string>() : "";
      if (t == "sliding_attention") {
        if (window == 0) throw_input_error("{}: sliding_attention layers need 'sliding_window'", path);
        c.layer_sliding_window[i] = window;
      } else if (t != "full_attention") {
        throw_input_error("{}: layer_types[{}] must be \"full_attention\" or \"sliding_attention\"", path, i);
      }
    }
    return;
  }
  if (window == 0) return;
  if (c.model_type == "qwen2") {
    // HF Qwen2: the window applies only with use_sliding_window, to layers
    // from max_window_layers on.
    bool use = false;
    f.boolean("use_sliding_window", use);
    if (!use) return;
    int64_t max_window_layers = c.num_hidden_layers;
    if (f.has("max_window_layers")) f.positive_int("max_window_layers", max_window_layers, false);
    for (int64_t i = max_window_layers; i < c.num_hidden_layers; ++i) c.layer_sliding_window[i] = window;
    return;
  }
  // Mistral style: one window for every layer.
  for (auto& w : c.layer_sliding_window) w = window;
}

}  // namespace

ModelConfig load_model_config(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "config.json").string();
  const json j = read_json(path);
  if (!j.is_object()) throw_input_error("{}: expected a JSON object", path);
  const Fields f(j, path);
  ModelConfig c;

  if (!f.has("architectures") || !j["architectures"].is_array() || j["architectures"].empty() ||
      !j["architectures"][0].is_string()) {
    throw_input_error("{}: field 'architectures' must be a non-empty list of strings", path);
  }
  c.architecture = j["architectures"][0].get<std::string>();
  f.string("model_type", c.model_type);
  f.positive_int("hidden_size", c.hidden_size, true);
  f.positive_int("intermediate_size", c.intermediate_size, true);
  f.positive_int("num_hidden_layers", c.num_hidden_layers, true);
  f.positive_int("num_attention_heads", c.num_attention_heads, true);
  f.positive_int("vocab_size", c.vocab_size, true);
  c.num_key_value_heads = c.num_attention_heads;
  f.positive_int("num_key_value_heads", c.num_key_value_heads, false);
  if (c.hidden_size % c.num_attention_heads != 0 && !f.has("head_dim")) {
    throw_input_error("{}: hidden_size {} is not divisible by num_attention_heads {}", path,
                      c.hidden_size, c.num_attention_heads);
  }
  c.head_dim = c.hidden_size / c.num_attention_heads;
  f.positive_int("head_dim", c.head_dim, false);
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    throw_input_error("{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", path,
                      c.num_attention_heads, c.num_key_value_heads);
  }
  f.positive_int("max_position_embeddings", c.max_position_embeddings, false);
  f.number("rms_norm_eps", c.rms_norm_eps);
  f.number("rope_theta", c.rope_theta);
  if (c.rms_norm_eps <= 0) throw_input_error("{}: field 'rms_norm_eps' must be positive", path);
  if (c.rope_theta <= 0) throw_input_error("{}: field 'rope_theta' must be positive", path);
  if (j.contains("rope_scaling")) c.rope_scaling = parse_rope_scaling(j["rope_scaling"], path);
  f.boolean("tie_word_embeddings", c.tie_word_embeddings);
  f.boolean("attention_bias", c.attention_bias);
  if (c.model_type == "qwen2") c.attention_bias = true;  // Qwen2 q/k/v always carry biases
  f.boolean("mlp_bias", c.mlp_bias);
  if (c.mlp_bias) throw_input_error("{}: mlp_bias true is not supported", path);
  f.string("hidden_act", c.hidden_act);
  f.string("torch_dtype", c.torch_dtype);
  f.optional_int("bos_token_id", c.bos_token_id);
  f.int_list("eos_token_id", c.eos_token_ids);
  parse_sliding_window(j, f, path, c);

  const std::string gen_path = (std::filesystem::path(dir) / "generation_config.json").string();
  if (std::filesystem::exists(gen_path)) {
    const json g = read_json(gen_path);
    if (!g.is_object()) throw_input_error("{}: expected a JSON object", gen_path);
    const Fields gf(g, gen_path);
    gf.optional_int("bos_token_id", c.bos_token_id);
    gf.int_list("eos_token_id", c.eos_token_ids);
  }
  return c;
}

}  // namespace pagoda
