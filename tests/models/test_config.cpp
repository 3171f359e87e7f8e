// config.json / generation_config.json parsing: the demo model's values
// against its raw JSON, transformers' defaults and layouts (rope variants,
// sliding windows), and a table of bad fields that must each be refused with
// the file, the field and the value in the message.
#include <gtest/gtest.h>

#include <functional>

#include "checkpoint_test_util.h"
#include "models/config.h"

namespace pagoda {
namespace {

using namespace pagoda::test;
using nlohmann::json;

json demo_config() { return json::parse(read_file(fs::path(kStories) / "config.json")); }

// The smallest config load_model_config accepts.
json minimal_config() {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"hidden_size", 64},
          {"intermediate_size", 128},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 4},
          {"vocab_size", 100}};
}

// Writes cfg (and an optional generation config) into a fresh dir and parses it.
class ConfigDir {
 public:
  ModelConfig load(const json& cfg) {
    write_file(dir_ / "config.json", cfg.dump());
    return load_model_config(dir_.str());
  }
  void write_generation(const std::string& text) {
    write_file(dir_ / "generation_config.json", text);
  }
  std::string config_path() const { return (dir_ / "config.json").string(); }
  const TempDir& dir() const { return dir_; }

 private:
  TempDir dir_;
};

TEST(Config, DemoConfigMatchesItsJson) {
  const json raw = demo_config();
  const ModelConfig c = load_model_config(kStories);
  EXPECT_EQ(c.architecture, raw["architectures"][0].get<std::string>());
  EXPECT_EQ(c.model_type, raw["model_type"].get<std::string>());
  EXPECT_EQ(c.hidden_size, raw["hidden_size"].get<int64_t>());
  EXPECT_EQ(c.intermediate_size, raw["intermediate_size"].get<int64_t>());
  EXPECT_EQ(c.num_hidden_layers, raw["num_hidden_layers"].get<int64_t>());
  EXPECT_EQ(c.num_attention_heads, raw["num_attention_heads"].get<int64_t>());
  EXPECT_EQ(c.num_key_value_heads, raw["num_key_value_heads"].get<int64_t>());
  EXPECT_EQ(c.head_dim, raw["head_dim"].get<int64_t>());
  EXPECT_EQ(c.vocab_size, raw["vocab_size"].get<int64_t>());
  EXPECT_EQ(c.max_position_embeddings, raw["max_position_embeddings"].get<int64_t>());
  EXPECT_EQ(c.rms_norm_eps, raw["rms_norm_eps"].get<double>());
  EXPECT_EQ(c.rope_theta, raw["rope_theta"].get<double>());
  EXPECT_TRUE(raw["rope_scaling"].is_null());
  EXPECT_EQ(c.rope_scaling.type, "default");
  EXPECT_EQ(c.tie_word_embeddings, raw["tie_word_embeddings"].get<bool>());
  EXPECT_EQ(c.attention_bias, raw["attention_bias"].get<bool>());
  EXPECT_EQ(c.hidden_act, raw["hidden_act"].get<std::string>());
  EXPECT_EQ(c.torch_dtype, raw["torch_dtype"].get<std::string>());
  EXPECT_EQ(c.layer_sliding_window, std::vector<int64_t>(5, 0));
  const json gen = json::parse(read_file(fs::path(kStories) / "generation_config.json"));
  EXPECT_EQ(c.bos_token_id, gen["bos_token_id"].get<int32_t>());
  EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{gen["eos_token_id"].get<int32_t>()});
  // The bf16 copy differs only in torch_dtype.
  const ModelConfig b = load_model_config(kStoriesBf16);
  EXPECT_EQ(b.torch_dtype, "bfloat16");
  EXPECT_EQ(b.hidden_size, c.hidden_size);
}

TEST(Config, OptionalFieldsTakeTransformersDefaults) {
  ConfigDir d;
  const ModelConfig c = d.load(minimal_config());
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.model_type, "");
  EXPECT_EQ(c.num_key_value_heads, 4);  // = num_attention_heads (no GQA)
  EXPECT_EQ(c.head_dim, 16);            // = hidden_size / num_attention_heads
  EXPECT_EQ(c.max_position_embeddings, 0);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.rope_scaling.type, "default");
  EXPECT_EQ(c.rope_scaling.factor, 1.0);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.mlp_bias);
  EXPECT_EQ(c.hidden_act, "silu");
  EXPECT_EQ(c.torch_dtype, "");
  EXPECT_EQ(c.layer_sliding_window, std::vector<int64_t>(2, 0));
  EXPECT_FALSE(c.bos_token_id.has_value());
  EXPECT_TRUE(c.eos_token_ids.empty());

  // null means "not given" for every optional field.
  json j = minimal_config();
  for (const char* k :
       {"num_key_value_heads", "head_dim", "rope_scaling", "rms_norm_eps", "rope_theta",
        "sliding_window", "bos_token_id", "eos_token_id", "tie_word_embeddings", "torch_dtype"}) {
    j[k] = nullptr;
  }
  const ModelConfig n = d.load(j);
  EXPECT_EQ(n.head_dim, 16);
  EXPECT_EQ(n.num_key_value_heads, 4);
  EXPECT_EQ(n.rope_theta, 10000.0);
  EXPECT_FALSE(n.bos_token_id.has_value());

  // Unknown fields are ignored; head_dim may differ from hidden/heads (Qwen3).
  j = minimal_config();
  j["some_future_field"] = {{"nested", {1, 2, 3}}};
  j["hidden_size"] = 60;  // not divisible by 8 heads, fine with an explicit head_dim
  j["num_attention_heads"] = 8;
  j["head_dim"] = 32;
  j["dtype"] = "bfloat16";  // transformers v5 spelling of torch_dtype
  const ModelConfig q = d.load(j);
  EXPECT_EQ(q.head_dim, 32);
  EXPECT_EQ(q.torch_dtype, "bfloat16");
}

struct BadField {
  std::function<void(json&)> edit;
  std::vector<std::string> needles;  // besides the config.json path
};

TEST(Config, WrongFieldsAreRefusedNamingFieldAndValue) {
  const std::vector<BadField> cases = {
      {[](json& j) { j["hidden_size"] = "64"; },
       {"field 'hidden_size' must be a positive integer, got \"64\""}},
      {[](json& j) { j["hidden_size"] = 64.0; },
       {"field 'hidden_size' must be a positive integer, got 64.0"}},
      {[](json& j) { j["intermediate_size"] = 0; },
       {"field 'intermediate_size' must be a positive integer, got 0"}},
      {[](json& j) { j["num_hidden_layers"] = -1; },
       {"field 'num_hidden_layers' must be a positive integer, got -1"}},
      {[](json& j) { j["num_attention_heads"] = true; }, {"'num_attention_heads'", "got true"}},
      {[](json& j) { j["vocab_size"] = json::array({512}); }, {"'vocab_size'", "got an array"}},
      {[](json& j) { j["vocab_size"] = 1ll << 40; },
       {"'vocab_size' must be at most 2147483647, got 1099511627776"}},
      {[](json& j) { j["num_key_value_heads"] = "4"; },
       {"'num_key_value_heads'", "positive integer"}},
      {[](json& j) {
         j["head_dim"] = {{"a", 1}};
       },
       {"'head_dim'", "got an object"}},
      {[](json& j) { j["max_position_embeddings"] = 1.5; },
       {"'max_position_embeddings'", "got 1.5"}},
      {[](json& j) { j["rms_norm_eps"] = "x"; },
       {"field 'rms_norm_eps' must be a positive number, got \"x\""}},
      {[](json& j) { j["rms_norm_eps"] = 0; }, {"'rms_norm_eps'", "positive number"}},
      {[](json& j) { j["rope_theta"] = -10000.0; }, {"'rope_theta'", "positive number"}},
      {[](json& j) { j["tie_word_embeddings"] = 1; },
       {"field 'tie_word_embeddings' must be true or false, got 1"}},
      {[](json& j) { j["attention_bias"] = "false"; }, {"'attention_bias'", "true or false"}},
      {[](json& j) { j["mlp_bias"] = 0; }, {"'mlp_bias'", "true or false"}},
      {[](json& j) { j["hidden_act"] = 5; }, {"field 'hidden_act' must be a string, got 5"}},
      {[](json& j) { j["model_type"] = json::array(); }, {"'model_type'", "a string"}},
      {[](json& j) { j["torch_dtype"] = false; }, {"'torch_dtype'", "a string"}},
      {[](json& j) { j["bos_token_id"] = -1; }, {"'bos_token_id'", "token id", "got -1"}},
      {[](json& j) { j["bos_token_id"] = {1}; }, {"'bos_token_id'", "token id"}},
      {[](json& j) { j["eos_token_id"] = "2"; },
       {"'eos_token_id'", "a token id or a list of token ids", "\"2\""}},
      {[](json& j) {
         j["eos_token_id"] = {2, "3"};
       },
       {"'eos_token_id'", "a list of token ids"}},
      {[](json& j) { j["eos_token_id"] = 1ll << 33; }, {"'eos_token_id'"}},
      {[](json& j) { j["architectures"] = json::array(); },
       {"field 'architectures' must be a non-empty list of strings"}},
      {[](json& j) { j["architectures"] = "LlamaForCausalLM"; },
       {"'architectures'", "\"LlamaForCausalLM\""}},
      {[](json& j) { j["architectures"] = {1}; }, {"'architectures'", "list of strings"}},
      {[](json& j) { j["rope_scaling"] = "linear"; }, {"'rope_scaling'", "an object or null"}},
      {[](json& j) {
         j["rope_scaling"] = {{"rope_type", 3}};
       },
       {"'rope_scaling.rope_type'", "a string"}},
      {[](json& j) {
         j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", "2"}};
       },
       {"'rope_scaling.factor'", "positive number"}},
      {[](json& j) { j["sliding_window"] = "4096"; }, {"'sliding_window'", "positive integer"}},
      {[](json& j) {
         j["use_sliding_window"] = "yes";
         j["sliding_window"] = 8;
       },
       {"'use_sliding_window'"}},
      {[](json& j) {
         j["use_sliding_window"] = true;
         j["sliding_window"] = 8;
         j["max_window_layers"] = -1;
       },
       {"'max_window_layers' must be a non-negative integer"}},
      {[](json& j) { j["layer_types"] = {"full_attention"}; }, {"'layer_types'", "a list of 5"}},
      {[](json& j) { j["layer_types"] = "full_attention"; }, {"'layer_types'"}},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    ConfigDir d;
    json j = demo_config();
    cases[i].edit(j);
    auto needles = cases[i].needles;
    needles.push_back(d.config_path() + ": ");
    expect_input_error([&] { d.load(j); }, needles);
  }
}

TEST(Config, MissingRequiredFields) {
  for (const char* field : {"architectures", "hidden_size", "intermediate_size",
                            "num_hidden_layers", "num_attention_heads", "vocab_size"}) {
    SCOPED_TRACE(field);
    ConfigDir d;
    json j = minimal_config();
    j.erase(field);
    expect_input_error([&] { d.load(j); },
                       {d.config_path() + ": missing required field '" + std::string(field) + "'"});
    j[field] = nullptr;  // null is as good as missing
    expect_input_error([&] { d.load(j); }, {"missing required field '" + std::string(field) + "'"});
  }
}

TEST(Config, HeadCountsMustDivide) {
  ConfigDir d;
  json j = minimal_config();
  j["num_attention_heads"] = 8;
  j["num_key_value_heads"] = 3;
  expect_input_error(
      [&] { d.load(j); },
      {d.config_path(), "num_attention_heads 8 is not a multiple of num_key_value_heads 3"});
  j["num_key_value_heads"] = 16;  // more KV heads than query heads
  expect_input_error([&] { d.load(j); }, {"not a multiple of num_key_value_heads 16"});
  j["num_key_value_heads"] = 2;
  EXPECT_EQ(d.load(j).num_key_value_heads, 2);
  j["num_attention_heads"] = 6;  // 64 / 6 is not whole and no head_dim is given
  expect_input_error([&] { d.load(j); },
                     {d.config_path(), "hidden_size 64 is not divisible by num_attention_heads 6"});
}

TEST(Config, MissingOrInvalidFiles) {
  {
    ConfigDir d;
    expect_input_error([&] { load_model_config(d.dir().str()); },
                       {d.config_path() + ": not found"});
  }
  {
    ConfigDir d;
    write_file(d.dir() / "config.json", "{\"hidden_size\": 64,\n \"vocab_size\": }");
    expect_input_error([&] { load_model_config(d.dir().str()); },
                       {d.config_path() + ": invalid JSON", "line 2, column"});
  }
  {
    ConfigDir d;
    write_file(d.dir() / "config.json", "[1, 2]");
    expect_input_error([&] { load_model_config(d.dir().str()); },
                       {d.config_path(), "expected a JSON object"});
  }
  {
    ConfigDir d;
    write_file(d.dir() / "config.json", "{\"hidden_size\": 1e999}");
    expect_input_error([&] { load_model_config(d.dir().str()); },
                       {d.config_path(), "invalid JSON"});
  }
  {
    ConfigDir d;
    d.write_generation("{\"eos_token_id\": [1,");
    expect_input_error([&] { d.load(minimal_config()); },
                       {(d.dir() / "generation_config.json").string() + ": invalid JSON"});
    d.write_generation(R"({"eos_token_id": "</s>"})");
    expect_input_error([&] { d.load(minimal_config()); },
                       {(d.dir() / "generation_config.json").string() + ": field 'eos_token_id'"});
  }
}

TEST(Config, EosListsAndGenerationConfigOverride) {
  ConfigDir d;
  json j = minimal_config();
  j["bos_token_id"] = 1;
  j["eos_token_id"] = {2, 7};
  ModelConfig c = d.load(j);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{2, 7}));
  EXPECT_EQ(c.bos_token_id, 1);
  j["eos_token_id"] = json::array();
  EXPECT_TRUE(d.load(j).eos_token_ids.empty());

  j["eos_token_id"] = 2;
  d.write_generation(R"({"eos_token_id": [9, 10, 11], "bos_token_id": 5, "temperature": 0.6})");
  c = d.load(j);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{9, 10, 11}));
  EXPECT_EQ(c.bos_token_id, 5);
  // A generation config that does not mention the ids keeps config.json's.
  d.write_generation(R"({"eos_token_id": null, "do_sample": true})");
  c = d.load(j);
  EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{2});
  EXPECT_EQ(c.bos_token_id, 1);
}

TEST(Config, RopeScalingVariants) {
  ConfigDir d;
  json j = minimal_config();
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 4}};  // legacy key
  ModelConfig c = d.load(j);
  EXPECT_EQ(c.rope_scaling.type, "linear");
  EXPECT_EQ(c.rope_scaling.factor, 4.0);

  // Llama 3.1's block, as shipped.
  j["rope_theta"] = 500000.0;
  j["rope_scaling"] = {{"factor", 8.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192},
                       {"rope_type", "llama3"}};
  c = d.load(j);
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_EQ(c.rope_scaling.factor, 8.0);
  EXPECT_EQ(c.rope_scaling.low_freq_factor, 1.0);
  EXPECT_EQ(c.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(c.rope_theta, 500000.0);

  j["rope_scaling"] = {{"rope_type", "default"}};
  EXPECT_EQ(d.load(j).rope_scaling.type, "default");

  // transformers v5 keeps theta and type together in rope_parameters.
  j.erase("rope_scaling");
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1000000.0}};
  c = d.load(j);
  EXPECT_EQ(c.rope_theta, 1000000.0);
  EXPECT_EQ(c.rope_scaling.type, "default");
  j.erase("rope_parameters");

  const std::vector<std::pair<json, std::vector<std::string>>> bad = {
      {{{"rope_type", "longrope"}, {"factor", 4.0}},
       {"rope_scaling.rope_type 'longrope' is not supported", "yarn, deepseek_yarn"}},
      // YaRN needs its original context (here no max_position_embeddings
      // to fall back on) and a non-empty correction range.
      {{{"rope_type", "yarn"}, {"factor", 4.0}},
       {"missing required field 'rope_scaling.original_max_position_embeddings'"}},
      {{{"rope_type", "yarn"},
        {"factor", 4.0},
        {"original_max_position_embeddings", 1024},
        {"beta_fast", 1},
        {"beta_slow", 32}},
       {"beta_fast (1) must exceed beta_slow (32)"}},
      {{{"type", "dynamic"}, {"factor", 2.0}}, {"rope_scaling.type 'dynamic' is not supported"}},
      {{{"rope_type", "linear"}}, {"missing required field 'rope_scaling.factor'"}},
      {{{"rope_type", "linear"}, {"factor", 0}},
       {"'rope_scaling.factor' must be a positive number"}},
      {{{"rope_type", "llama3"},
        {"factor", 8.0},
        {"low_freq_factor", 1.0},
        {"high_freq_factor", 4.0}},
       {"missing required field 'rope_scaling.original_max_position_embeddings'"}},
      {{{"rope_type", "llama3"},
        {"factor", 8.0},
        {"high_freq_factor", 4.0},
        {"original_max_position_embeddings", 8192}},
       {"missing required field 'rope_scaling.low_freq_factor'"}},
      {{{"rope_type", "llama3"},
        {"factor", 8.0},
        {"low_freq_factor", 4.0},
        {"high_freq_factor", 4.0},
        {"original_max_position_embeddings", 8192}},
       {"high_freq_factor (4) must exceed low_freq_factor (4)"}},
  };
  for (const auto& [scaling, needles] : bad) {
    SCOPED_TRACE(scaling.dump());
    j["rope_scaling"] = scaling;
    auto n = needles;
    n.push_back(d.config_path() + ": ");
    expect_input_error([&] { d.load(j); }, n);
  }
  j.erase("rope_scaling");
  j["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}}}};  // per-layer-type map
  expect_input_error([&] { d.load(j); }, {"missing required field 'rope_parameters.rope_type'"});
}

TEST(Config, Qwen2AlwaysHasAttentionBias) {
  ConfigDir d;
  json j = minimal_config();
  j["model_type"] = "qwen2";
  EXPECT_TRUE(d.load(j).attention_bias);
  j["attention_bias"] = false;  // Qwen2's modeling code ignores such a flag
  EXPECT_TRUE(d.load(j).attention_bias);
  j["model_type"] = "llama";
  EXPECT_FALSE(d.load(j).attention_bias);
  j["attention_bias"] = true;
  EXPECT_TRUE(d.load(j).attention_bias);
}

TEST(Config, SlidingWindowLayouts) {
  ConfigDir d;
  json j = demo_config();  // 5 layers
  // 1. layer_types (newer transformers).
  j["sliding_window"] = 32;
  j["layer_types"] = {"full_attention", "sliding_attention", "full_attention", "sliding_attention",
                      "full_attention"};
  EXPECT_EQ(d.load(j).layer_sliding_window, (std::vector<int64_t>{0, 32, 0, 32, 0}));
  j["layer_types"][0] = "chunked_attention";
  expect_input_error([&] { d.load(j); },
                     {d.config_path(), "layer_types[0] is \"chunked_attention\""});
  j["layer_types"][0] = "full_attention";
  j["sliding_window"] = nullptr;
  expect_input_error([&] { d.load(j); },
                     {"layer_types[1] is \"sliding_attention\"", "'sliding_window'"});
  j.erase("layer_types");

  // 2. Qwen2 style: layers with index >= max_window_layers get the window.
  j["sliding_window"] = 32;
  j["model_type"] = "qwen2";
  j["use_sliding_window"] = true;
  j["max_window_layers"] = 3;
  EXPECT_EQ(d.load(j).layer_sliding_window, (std::vector<int64_t>{0, 0, 0, 32, 32}));
  j["max_window_layers"] = 0;
  EXPECT_EQ(d.load(j).layer_sliding_window, std::vector<int64_t>(5, 32));
  j.erase("max_window_layers");  // transformers' default is 28: no layer of 5
  EXPECT_EQ(d.load(j).layer_sliding_window, std::vector<int64_t>(5, 0));
  j["num_hidden_layers"] = 30;
  std::vector<int64_t> expected(30, 0);
  for (int i = 28; i < 30; ++i) expected[i] = 32;
  EXPECT_EQ(d.load(j).layer_sliding_window, expected);
  j["num_hidden_layers"] = 5;
  j["max_window_layers"] = 3;
  j["use_sliding_window"] = false;  // Qwen2.5 ships this with sliding_window set
  EXPECT_EQ(d.load(j).layer_sliding_window, std::vector<int64_t>(5, 0));
  j.erase("use_sliding_window");  // qwen model_type: off unless enabled
  EXPECT_EQ(d.load(j).layer_sliding_window, std::vector<int64_t>(5, 0));
  j["model_type"] = "qwen3";  // same semantics
  j["use_sliding_window"] = true;
  EXPECT_EQ(d.load(j).layer_sliding_window, (std::vector<int64_t>{0, 0, 0, 32, 32}));
  j["sliding_window"] = nullptr;
  expect_input_error([&] { d.load(j); }, {"use_sliding_window is true", "'sliding_window'"});

  // 3. Mistral style: a window and no Qwen switch applies to every layer.
  j = demo_config();
  j["model_type"] = "mistral";
  j["sliding_window"] = 4096;
  EXPECT_EQ(d.load(j).layer_sliding_window, std::vector<int64_t>(5, 4096));
  j["sliding_window"] = nullptr;  // Mistral v0.2+: no window
  EXPECT_EQ(d.load(j).layer_sliding_window, std::vector<int64_t>(5, 0));
}

}  // namespace
}  // namespace pagoda
