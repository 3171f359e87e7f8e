// Safetensors/config loading on the real demo checkpoints, a sharded copy
// written here, and a table of broken checkpoints that must be refused with
// a message naming the file/tensor and the reason.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/checkpoint.h"
#include "models/config.h"
#include "models/model.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;
const std::string kStories = PAGODA_MODELS_DIR "/stories260k";

class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = fs::temp_directory_path() /
            ("pagoda_ckpt_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string str() const { return path_.string(); }
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void write_file(const fs::path& p, const std::string& data) {
  std::ofstream(p, std::ios::binary) << data;
}

// A safetensors file from a header JSON and a data blob.
std::string safetensors_bytes(const nlohmann::json& header, const std::string& data) {
  const std::string h = header.dump();
  std::string out(8, '\0');
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + h + data;
}

// Copies config/tokenizer files of the demo model into dir.
void copy_model_metadata(const fs::path& dir) {
  for (const char* f :
       {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"}) {
    fs::copy_file(fs::path(kStories) / f, dir / f, fs::copy_options::overwrite_existing);
  }
}

template <typename Fn>
void expect_input_error(Fn&& fn, const std::vector<std::string>& needles) {
  try {
    fn();
    ADD_FAILURE() << "expected an InputError mentioning " << needles[0];
  } catch (const InputError& e) {
    for (const auto& n : needles)
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
}

TEST(Checkpoint, LoadsDemoModel) {
  const auto ckpt = Checkpoint::open(kStories);
  EXPECT_EQ(ckpt->names().size(), 47u);
  EXPECT_EQ(ckpt->get("model.embed_tokens.weight", {512, 64}).dtype, DType::F32);
  EXPECT_EQ(ckpt->get("model.layers.0.self_attn.q_proj.weight", {64, 64}).numel(), 64 * 64);
  EXPECT_EQ(ckpt->get("model.layers.4.self_attn.k_proj.weight").shape,
            (std::vector<int64_t>{32, 64}));
  EXPECT_FALSE(ckpt->has("lm_head.weight"));
}

TEST(Checkpoint, Bf16CopyHoldsTheRoundedF32Values) {
  const auto f32 = Checkpoint::open(kStories);
  const auto bf16 = Checkpoint::open(PAGODA_TEST_DATA_DIR "/stories260k-bf16");
  for (const std::string& name : f32->names()) {
    const TensorInfo& a = f32->get(name);
    const TensorInfo& b = bf16->get(name);
    ASSERT_EQ(b.dtype, DType::BF16) << name;
    ASSERT_EQ(a.shape, b.shape) << name;
    for (int64_t i = 0; i < a.numel(); ++i) {
      float f;
      uint16_t h;
      std::memcpy(&f, static_cast<const char*>(a.data) + 4 * i, 4);
      std::memcpy(&h, static_cast<const char*>(b.data) + 2 * i, 2);
      ASSERT_EQ(h, f32_to_bf16(f)) << name << "[" << i << "]";
    }
  }
}

TEST(Checkpoint, ShardedCopyMatchesSingleFile) {
  const auto single = Checkpoint::open(kStories);
  TempDir dir;
  copy_model_metadata(dir / "");
  nlohmann::json weight_map;
  nlohmann::json headers[2] = {nlohmann::json::object(), nlohmann::json::object()};
  std::string blobs[2];
  int i = 0;
  for (const std::string& name : single->names()) {
    const TensorInfo& t = single->get(name);
    const int shard = i++ % 2;
    headers[shard][name] = {
        {"dtype", "F32"},
        {"shape", t.shape},
        {"data_offsets", {blobs[shard].size(), blobs[shard].size() + t.nbytes}}};
    blobs[shard].append(static_cast<const char*>(t.data), t.nbytes);
    weight_map[name] = "model-0000" + std::to_string(shard + 1) + "-of-00002.safetensors";
  }
  for (int s = 0; s < 2; ++s) {
    write_file(dir / ("model-0000" + std::to_string(s + 1) + "-of-00002.safetensors"),
               safetensors_bytes(headers[s], blobs[s]));
  }
  write_file(dir / "model.safetensors.index.json",
             nlohmann::json{{"weight_map", weight_map}}.dump());
  const auto sharded = Checkpoint::open(dir.str());
  ASSERT_EQ(sharded->names(), single->names());
  for (const std::string& name : single->names()) {
    const TensorInfo& a = single->get(name);
    const TensorInfo& b = sharded->get(name);
    ASSERT_EQ(a.nbytes, b.nbytes);
    EXPECT_EQ(std::memcmp(a.data, b.data, a.nbytes), 0) << name;
  }
  EXPECT_NO_THROW(load_model(dir.str()));
}

struct BadFile {
  std::string name;
  std::function<std::string(const std::string& original)> make;
  std::vector<std::string> needles;
};

TEST(Checkpoint, BrokenFilesAreRefused) {
  const std::string original = read_file(fs::path(kStories) / "model.safetensors");
  const nlohmann::json one_tensor = {
      {"w", {{"dtype", "F32"}, {"shape", {2, 2}}, {"data_offsets", {0, 16}}}}};
  const std::vector<BadFile> cases = {
      {"tiny file", [](const std::string&) { return std::string("abc"); }, {"too short"}},
      {"cut in data",
       [](const std::string& o) { return o.substr(0, o.size() / 2); },
       {"outside the data section"}},
      {"cut in header", [](const std::string& o) { return o.substr(0, 100); }, {"header length"}},
      {"huge header length",
       [](const std::string& o) {
         std::string s = o;
         s[7] = '\x7f';
         return s;
       },
       {"header length"}},
      {"header not JSON",
       [](const std::string&) {
         return safetensors_bytes(nlohmann::json(), "").replace(8, 4, "{oo}");
       },
       {"not valid JSON"}},
      {"header array",
       [](const std::string&) {
         return safetensors_bytes(nlohmann::json::array({1, 2}), "");
       },
       {"not a JSON object"}},
      {"unknown dtype",
       [](const std::string&) {
         return safetensors_bytes(
             {{"w", {{"dtype", "F8_E9"}, {"shape", {1}}, {"data_offsets", {0, 1}}}}}, "x");
       },
       {"'w'", "F8_E9"}},
      {"negative shape",
       [](const std::string&) {
         return safetensors_bytes(
             {{"w", {{"dtype", "F32"}, {"shape", {-1, 2}}, {"data_offsets", {0, 8}}}}},
             std::string(8, 0));
       },
       {"'w'", "non-negative"}},
      {"offsets past end",
       [&](const std::string&) { return safetensors_bytes(one_tensor, std::string(8, 0)); },
       {"'w'", "outside the data section"}},
      {"size mismatch",
       [](const std::string&) {
         return safetensors_bytes(
             {{"w", {{"dtype", "F32"}, {"shape", {3}}, {"data_offsets", {0, 8}}}}},
             std::string(8, 0));
       },
       {"'w'", "needs 12"}},
      {"offsets not ints",
       [](const std::string&) {
         return safetensors_bytes(
             {{"w", {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", "0-4"}}}},
             std::string(4, 0));
       },
       {"'w'", "data_offsets"}},
  };
  for (const BadFile& c : cases) {
    SCOPED_TRACE(c.name);
    TempDir dir;
    write_file(dir / "model.safetensors", c.make(original));
    std::vector<std::string> needles = c.needles;
    needles.push_back("model.safetensors");
    expect_input_error([&] { Checkpoint::open(dir.str()); }, needles);
  }
}

TEST(Checkpoint, BrokenIndexAndTensorChecks) {
  {
    TempDir dir;
    write_file(dir / "model.safetensors.index.json",
               R"({"weight_map": {"a": "missing-shard.safetensors"}})");
    expect_input_error([&] { Checkpoint::open(dir.str()); },
                       {"missing-shard.safetensors", "does not exist"});
  }
  {
    TempDir dir;
    write_file(
        dir / "s1.safetensors",
        safetensors_bytes({{"a", {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {0, 4}}}}},
                          std::string(4, 0)));
    write_file(dir / "model.safetensors.index.json",
               R"({"weight_map": {"a": "s1.safetensors", "b": "s1.safetensors"}})");
    expect_input_error([&] { Checkpoint::open(dir.str()); }, {"'b'", "s1.safetensors"});
  }
  {
    TempDir dir;
    expect_input_error([&] { Checkpoint::open(dir.str()); }, {"no model.safetensors"});
  }
  const auto ckpt = Checkpoint::open(kStories);
  expect_input_error([&] { ckpt->get("model.norm.weight", {65}); },
                     {"model.norm.weight", "[64]", "[65]"});
  expect_input_error([&] { ckpt->get("lm_head.weight"); }, {"missing tensor 'lm_head.weight'"});
  TempDir dir;
  write_file(
      dir / "model.safetensors",
      safetensors_bytes({{"ids", {{"dtype", "I32"}, {"shape", {1}}, {"data_offsets", {0, 4}}}}},
                        std::string(4, 0)));
  const auto ints = Checkpoint::open(dir.str());
  expect_input_error([&] { ints->get("ids", {1}); }, {"'ids'", "I32"});
}

// A demo-model copy whose weights or config were tampered with.
TEST(LoadModel, MismatchedCheckpointIsRefusedWithTensorName) {
  const auto ckpt = Checkpoint::open(kStories);
  auto write_variant = [&](const fs::path& dir, const std::string& skip, const std::string& reshape,
                           const std::string& retype) {
    copy_model_metadata(dir);
    nlohmann::json header = nlohmann::json::object();
    std::string blob;
    for (const std::string& name : ckpt->names()) {
      if (name == skip) continue;
      const TensorInfo& t = ckpt->get(name);
      std::vector<int64_t> shape = t.shape;
      std::string dtype = "F32", data(static_cast<const char*>(t.data), t.nbytes);
      if (name == reshape) shape = {t.numel()};
      if (name == retype) dtype = "I32";
      header[name] = {{"dtype", dtype},
                      {"shape", shape},
                      {"data_offsets", {blob.size(), blob.size() + data.size()}}};
      blob += data;
    }
    write_file(dir / "model.safetensors", safetensors_bytes(header, blob));
  };
  {
    TempDir dir;
    write_variant(dir / "", "model.layers.2.mlp.up_proj.weight", "", "");
    expect_input_error([&] { load_model(dir.str()); },
                       {"missing tensor 'model.layers.2.mlp.up_proj.weight'"});
  }
  {
    TempDir dir;
    write_variant(dir / "", "", "model.layers.1.self_attn.v_proj.weight", "");
    expect_input_error([&] { load_model(dir.str()); },
                       {"model.layers.1.self_attn.v_proj.weight", "shape"});
  }
  {
    TempDir dir;
    write_variant(dir / "", "", "", "model.norm.weight");
    expect_input_error([&] { load_model(dir.str()); }, {"model.norm.weight", "I32"});
  }
  {
    TempDir dir;
    write_variant(dir / "", "", "", "");
    auto cfg = nlohmann::json::parse(read_file(dir / "config.json"));
    cfg["architectures"] = {"GPT2LMHeadModel"};
    write_file(dir / "config.json", cfg.dump());
    expect_input_error([&] { load_model(dir.str()); },
                       {"unknown architecture 'GPT2LMHeadModel'", "LlamaForCausalLM"});
  }
}

TEST(Config, ParsesDemoConfig) {
  const ModelConfig c = load_model_config(kStories);
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{2});
  EXPECT_EQ(c.rope_scaling.type, "default");
}

TEST(Config, FieldErrorsNameTheField) {
  const auto base = nlohmann::json::parse(read_file(fs::path(kStories) / "config.json"));
  struct Case {
    std::function<void(nlohmann::json&)> edit;
    std::vector<std::string> needles;
  };
  const std::vector<Case> cases = {
      {[](auto& j) { j["hidden_size"] = "64"; }, {"'hidden_size'", "positive integer", "\"64\""}},
      {[](auto& j) { j["rms_norm_eps"] = "x"; }, {"'rms_norm_eps'", "number"}},
      {[](auto& j) { j["tie_word_embeddings"] = 1; }, {"'tie_word_embeddings'", "true or false"}},
      {[](auto& j) { j.erase("num_hidden_layers"); },
       {"missing required field 'num_hidden_layers'"}},
      {[](auto& j) { j["num_key_value_heads"] = 3; }, {"num_key_value_heads 3"}},
      {[](auto& j) {
         j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 2.0}};
       },
       {"yarn"}},
      {[](auto& j) { j["architectures"] = nlohmann::json::array(); }, {"'architectures'"}},
      {[](auto& j) { j["eos_token_id"] = "2"; }, {"'eos_token_id'"}},
      {[](auto& j) { j["vocab_size"] = -5; }, {"'vocab_size'"}},
  };
  for (const Case& c : cases) {
    TempDir dir;
    nlohmann::json j = base;
    c.edit(j);
    write_file(dir / "config.json", j.dump());
    auto needles = c.needles;
    needles.push_back("config.json");
    expect_input_error([&] { load_model_config(dir.str()); }, needles);
  }
  TempDir missing;
  expect_input_error([&] { load_model_config(missing.str()); }, {"config.json", "cannot open"});
  TempDir invalid;
  write_file(invalid / "config.json", "{\"hidden_size\": ");
  expect_input_error([&] { load_model_config(invalid.str()); }, {"config.json", "invalid JSON"});
}

TEST(Config, EosListsAndGenerationConfigOverride) {
  TempDir dir;
  auto j = nlohmann::json::parse(read_file(fs::path(kStories) / "config.json"));
  j["eos_token_id"] = {2, 7};
  write_file(dir / "config.json", j.dump());
  EXPECT_EQ(load_model_config(dir.str()).eos_token_ids, (std::vector<int32_t>{2, 7}));
  write_file(dir / "generation_config.json", R"({"eos_token_id": [9, 10, 11], "bos_token_id": 5})");
  const ModelConfig c = load_model_config(dir.str());
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{9, 10, 11}));
  EXPECT_EQ(c.bos_token_id, 5);
}

TEST(Config, SlidingWindowLayouts) {
  TempDir dir;
  auto j = nlohmann::json::parse(read_file(fs::path(kStories) / "config.json"));
  j["sliding_window"] = 32;
  j["layer_types"] = {"full_attention", "sliding_attention", "full_attention", "sliding_attention",
                      "full_attention"};
  write_file(dir / "config.json", j.dump());
  EXPECT_EQ(load_model_config(dir.str()).layer_sliding_window,
            (std::vector<int64_t>{0, 32, 0, 32, 0}));
  j.erase("layer_types");
  j["model_type"] = "qwen2";
  j["use_sliding_window"] = true;
  j["max_window_layers"] = 3;
  write_file(dir / "config.json", j.dump());
  EXPECT_EQ(load_model_config(dir.str()).layer_sliding_window,
            (std::vector<int64_t>{0, 0, 0, 32, 32}));
  j["use_sliding_window"] = false;
  write_file(dir / "config.json", j.dump());
  EXPECT_EQ(load_model_config(dir.str()).layer_sliding_window, (std::vector<int64_t>(5, 0)));
}

}  // namespace
}  // namespace pagoda
