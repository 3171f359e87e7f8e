// Safetensors loading, checked against sources that do not go through our
// loader: the demo model's config.json (tensor names and shapes), its bf16
// copy (made by an external float32 -> bfloat16 conversion), and sharded
// copies written here. Then broken and hostile files, which must all be
// refused with an InputError naming the file/tensor and the reason.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <set>

#include "checkpoint_test_util.h"
#include "core/error.h"
#include "models/checkpoint.h"
#include "models/model.h"

namespace pagoda {
namespace {

using namespace pagoda::test;
using nlohmann::json;

// Name -> shape of every tensor a HF Llama checkpoint with this config.json
// holds (tied embeddings: no lm_head), derived here from the raw JSON.
std::map<std::string, std::vector<int64_t>> expected_llama_tensors(const json& cfg) {
  const int64_t hidden = cfg["hidden_size"], inter = cfg["intermediate_size"],
                vocab = cfg["vocab_size"];
  const int64_t head_dim = cfg["head_dim"], heads = cfg["num_attention_heads"],
                kv = cfg["num_key_value_heads"];
  std::map<std::string, std::vector<int64_t>> out = {{"model.embed_tokens.weight", {vocab, hidden}},
                                                     {"model.norm.weight", {hidden}}};
  for (int i = 0; i < cfg["num_hidden_layers"].get<int>(); ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    out[p + "input_layernorm.weight"] = {hidden};
    out[p + "post_attention_layernorm.weight"] = {hidden};
    out[p + "self_attn.q_proj.weight"] = {heads * head_dim, hidden};
    out[p + "self_attn.k_proj.weight"] = {kv * head_dim, hidden};
    out[p + "self_attn.v_proj.weight"] = {kv * head_dim, hidden};
    out[p + "self_attn.o_proj.weight"] = {hidden, heads * head_dim};
    out[p + "mlp.gate_proj.weight"] = {inter, hidden};
    out[p + "mlp.up_proj.weight"] = {inter, hidden};
    out[p + "mlp.down_proj.weight"] = {hidden, inter};
  }
  return out;
}

// float -> bfloat16, round to nearest, ties to even: picks the closer of the
// two bf16 neighbours in double arithmetic. Deliberately not core's bit
// trick, so the bf16 check below does not share code with the library.
uint16_t reference_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const auto lo = static_cast<uint16_t>(bits >> 16);
  const auto hi = static_cast<uint16_t>(lo + 1);  // next value away from zero
  auto value = [](uint16_t h) {
    const uint32_t b = static_cast<uint32_t>(h) << 16;
    float v;
    std::memcpy(&v, &b, 4);
    return static_cast<double>(v);
  };
  const double err_lo = std::fabs(f - value(lo)), err_hi = std::fabs(value(hi) - f);
  if (err_lo != err_hi) return err_lo < err_hi ? lo : hi;
  return (lo & 1) ? hi : lo;
}

TEST(Safetensors, DemoModelMatchesItsConfig) {
  const json cfg = json::parse(read_file(fs::path(kStories) / "config.json"));
  const auto expected = expected_llama_tensors(cfg);
  ASSERT_EQ(expected.size(), 47u);
  const auto ckpt = Checkpoint::open(kStories);
  EXPECT_EQ(ckpt->names().size(), 47u);
  for (const auto& [name, shape] : expected) {
    SCOPED_TRACE(name);
    const TensorInfo& t = ckpt->get(name, shape);  // throws on a shape mismatch
    EXPECT_EQ(t.dtype, DType::F32);
    EXPECT_EQ(t.nbytes, static_cast<size_t>(t.numel()) * 4);
    EXPECT_EQ(t.name, name);
    EXPECT_NE(t.file.find("model.safetensors"), std::string::npos);
  }
  // The shapes the brief names, spelled out.
  EXPECT_EQ(ckpt->get("model.embed_tokens.weight").shape, (std::vector<int64_t>{512, 64}));
  EXPECT_EQ(ckpt->get("model.layers.0.self_attn.q_proj.weight").shape,
            (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(ckpt->get("model.layers.0.self_attn.k_proj.weight").shape,
            (std::vector<int64_t>{32, 64}));
  EXPECT_FALSE(ckpt->has("lm_head.weight"));
  EXPECT_TRUE(ckpt->has("model.norm.weight"));
  EXPECT_EQ(ckpt->dir(), kStories);

  // Tensors tile the data section: offsets are consistent with the file size.
  const auto file = SafetensorsFile::open(kStories + "/model.safetensors");
  EXPECT_EQ(file->metadata().at("format"), "pt");
  size_t total = 0;
  for (const auto& [name, t] : file->tensors()) total += t.nbytes;
  const std::string bytes = read_file(fs::path(kStories) / "model.safetensors");
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);  // x86: little endian
  EXPECT_EQ(8 + header_len + total, bytes.size());
}

TEST(Safetensors, Bf16CopyHoldsTheF32ValuesRoundedToBf16) {
  const auto f32 = Checkpoint::open(kStories);
  const auto bf16 = Checkpoint::open(kStoriesBf16);
  ASSERT_EQ(bf16->names(), f32->names());
  int64_t compared = 0, inexact = 0;
  for (const std::string& name : f32->names()) {
    const TensorInfo& a = f32->get(name);
    const TensorInfo& b = bf16->get(name, a.shape);
    ASSERT_EQ(b.dtype, DType::BF16) << name;
    ASSERT_EQ(b.nbytes, a.nbytes / 2) << name;
    for (int64_t i = 0; i < a.numel(); ++i) {
      float f;
      uint16_t h;
      std::memcpy(&f, static_cast<const char*>(a.data) + 4 * i, 4);
      std::memcpy(&h, static_cast<const char*>(b.data) + 2 * i, 2);
      ASSERT_TRUE(std::isfinite(f)) << name << "[" << i << "]";
      ASSERT_EQ(h, reference_bf16(f)) << name << "[" << i << "] = " << f;
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      inexact += (static_cast<uint32_t>(h) << 16) != bits;
      ++compared;
    }
  }
  EXPECT_GT(compared, 250000);
  EXPECT_GT(inexact, compared / 2);  // the check is not vacuous: most values did round
}

// Splits the demo model over two shards (alternating tensors), optionally
// with an index json; returns the shard file names.
std::vector<std::string> write_sharded_copy(const Checkpoint& single, const fs::path& dir,
                                            bool with_index) {
  const std::vector<std::string> shard_names = {"model-00001-of-00002.safetensors",
                                                "model-00002-of-00002.safetensors"};
  SafetensorsWriter shards[2];
  json weight_map = json::object();
  int i = 0;
  for (const std::string& name : single.names()) {
    const TensorInfo& t = single.get(name);
    const int s = i++ % 2;
    shards[s].add(name, "F32", t.shape, t.data, t.nbytes);
    weight_map[name] = shard_names[s];
  }
  for (int s = 0; s < 2; ++s) shards[s].write(dir / shard_names[s]);
  if (with_index) {
    write_file(dir / "model.safetensors.index.json",
               json{{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}}.dump(2));
  }
  return shard_names;
}

void expect_same_tensors(const Checkpoint& a, const Checkpoint& b) {
  ASSERT_EQ(a.names(), b.names());
  for (const std::string& name : a.names()) {
    const TensorInfo& x = a.get(name);
    const TensorInfo& y = b.get(name);
    EXPECT_EQ(x.dtype, y.dtype) << name;
    EXPECT_EQ(x.shape, y.shape) << name;
    ASSERT_EQ(x.nbytes, y.nbytes) << name;
    EXPECT_EQ(std::memcmp(x.data, y.data, x.nbytes), 0) << name;
  }
}

TEST(Checkpoint, ShardedCopyWithIndexMatchesSingleFile) {
  const auto single = Checkpoint::open(kStories);
  TempDir dir;
  const auto shard_names = write_sharded_copy(*single, dir / "", /*with_index=*/true);
  const auto sharded = Checkpoint::open(dir.str());
  expect_same_tensors(*single, *sharded);
  // Tensors really come from the two shard files.
  EXPECT_NE(sharded->get("model.embed_tokens.weight").file.find("-of-00002"), std::string::npos);
  std::set<std::string> files;
  for (const auto& name : sharded->names())
    files.insert(fs::path(sharded->get(name).file).filename().string());
  EXPECT_EQ(files, (std::set<std::string>(shard_names.begin(), shard_names.end())));
}

TEST(Checkpoint, ShardsWithoutIndexAreAllLoaded) {
  const auto single = Checkpoint::open(kStories);
  TempDir dir;
  write_sharded_copy(*single, dir / "", /*with_index=*/false);
  write_file(dir / "notes.txt", "not a tensor file");  // ignored: not *.safetensors
  expect_same_tensors(*single, *Checkpoint::open(dir.str()));
}

TEST(Checkpoint, LoadModelAcceptsTheShardedCopy) {
  TempDir dir;
  write_sharded_copy(*Checkpoint::open(kStories), dir / "", /*with_index=*/true);
  for (const char* f :
       {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"}) {
    fs::copy_file(fs::path(kStories) / f, dir / f);
  }
  EXPECT_NO_THROW(load_model(dir.str()));
}

TEST(Safetensors, EveryDtypeAndEdgeShapeLoads) {
  TempDir dir;
  SafetensorsWriter w;
  const std::string bytes = "0123456789abcdefghijklmnopqrstuv";  // 32 distinct bytes
  const std::vector<std::pair<std::string, DType>> dtypes = {
      {"F32", DType::F32}, {"BF16", DType::BF16}, {"F16", DType::F16}, {"I8", DType::I8},
      {"U8", DType::U8},   {"I32", DType::I32},   {"I64", DType::I64},
      {"F8_E4M3", DType::F8E4M3}, {"F8_E8M0", DType::F8E8M0}};
  for (const auto& [name, dtype] : dtypes)
    w.add(name, name, {2, 2}, bytes.data(), 4 * dtype_size(dtype));
  w.add("empty", "F32", {0, 7}, nullptr, 0);
  w.add("scalar", "F32", {}, bytes.data(), 4);
  w.write(dir / "t.safetensors");
  const auto f = SafetensorsFile::open((dir / "t.safetensors").string());
  ASSERT_EQ(f->tensors().size(), dtypes.size() + 2);
  for (const auto& [name, dtype] : dtypes) {
    const TensorInfo& t = f->tensors().at(name);
    EXPECT_EQ(t.dtype, dtype) << name;
    EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 2}));
    EXPECT_EQ(std::string(static_cast<const char*>(t.data), t.nbytes),
              bytes.substr(0, 4 * dtype_size(dtype)));
  }
  EXPECT_EQ(f->tensors().at("empty").numel(), 0);
  EXPECT_EQ(f->tensors().at("empty").nbytes, 0u);
  EXPECT_EQ(f->tensors().at("scalar").numel(), 1);
  EXPECT_TRUE(f->metadata().empty());
}

struct BadFile {
  std::string name;
  std::function<std::string()> make;  // the bytes of model.safetensors
  std::vector<std::string> needles;   // besides the file name
};

std::string one_tensor(const json& entry, size_t data_bytes) {
  return safetensors_bytes(json{{"w", entry}}, std::string(data_bytes, '\0'));
}

TEST(Safetensors, BrokenFilesAreRefusedWithFileTensorAndReason) {
  const std::string original = read_file(fs::path(kStories) / "model.safetensors");
  uint64_t header_len = 0;
  std::memcpy(&header_len, original.data(), 8);
  auto with_length = [&](uint64_t n) {
    std::string s = original;
    std::memcpy(s.data(), &n, 8);
    return s;
  };
  const json f32_2x2 = {{"dtype", "F32"}, {"shape", {2, 2}}, {"data_offsets", {0, 16}}};
  auto edited = [&](const char* key, const json& value) {
    json e = f32_2x2;
    if (value.is_null()) {
      e.erase(key);
    } else {
      e[key] = value;
    }
    return one_tensor(e, 16);
  };
  const std::vector<BadFile> cases = {
      {"empty file", [] { return std::string(); }, {"0 bytes, too short"}},
      {"tiny file", [] { return std::string("abc"); }, {"3 bytes, too short"}},
      {"cut in the data section",
       [&] { return original.substr(0, original.size() / 2); },
       {"tensor '", "outside the data section", "truncated"}},
      {"cut one byte short",
       [&] { return original.substr(0, original.size() - 1); },
       {"tensor '", "outside the data section"}},
      {"cut in the header",
       [&] { return original.substr(0, 100); },
       {"header length " + std::to_string(header_len), "exceeds the file size 100"}},
      {"header length = file size",
       [&] { return with_length(original.size()); },
       {"exceeds the file size"}},
      {"header length 2^64-1",
       [&] { return with_length(~uint64_t{0}); },
       {"exceeds the file size"}},
      {"header not JSON",
       [] { return safetensors_bytes(std::string("{oops}"), ""); },
       {"header is not valid JSON", "parse error"}},
      {"header JSON cut short", [&] { return with_length(header_len / 2); }, {"not valid JSON"}},
      {"header is an array",
       [] {
         return safetensors_bytes(json::array({1, 2}), "");
       },
       {"not a JSON object"}},
      {"header is a string",
       [] { return safetensors_bytes(std::string("\"hi\""), ""); },
       {"not a JSON object"}},
      {"header has invalid UTF-8",
       [] { return safetensors_bytes(std::string("{\"\xff\": 1}"), ""); },
       {"not valid JSON"}},
      {"number overflow",
       [] { return safetensors_bytes(std::string(R"({"w": {"shape": [1e999]}})"), ""); },
       {"not valid JSON"}},
      {"deeply nested header",
       [] { return safetensors_bytes(std::string(100000, '[') + std::string(100000, ']'), ""); },
       {"not a JSON object"}},
      {"entry not an object",
       [] {
         return safetensors_bytes(json{{"w", 5}}, "");
       },
       {"tensor 'w'", "not a JSON object"}},
      {"deeply nested entry",
       [] {
         return safetensors_bytes(
             "{\"w\": " + std::string(50000, '[') + std::string(50000, ']') + "}", "");
       },
       {"tensor 'w'", "not a JSON object"}},
      {"dtype missing", [&] { return edited("dtype", nullptr); }, {"tensor 'w'", "missing dtype"}},
      {"dtype not a string", [&] { return edited("dtype", 4); }, {"tensor 'w'", "missing dtype"}},
      {"unknown dtype",
       [&] { return edited("dtype", "F8_E9"); },
       {"tensor 'w'", "unsupported dtype \"F8_E9\""}},
      {"lower-case dtype",
       [&] { return edited("dtype", "f32"); },
       {"tensor 'w'", "unsupported dtype"}},
      {"shape missing", [&] { return edited("shape", nullptr); }, {"tensor 'w'", "missing shape"}},
      {"shape not a list", [&] { return edited("shape", 4); }, {"tensor 'w'", "missing shape"}},
      {"negative shape",
       [&] {
         return edited("shape", {-2, -2});
       },
       {"tensor 'w'", "non-negative integers"}},
      {"fractional shape",
       [&] {
         return edited("shape", {2.0, 2});
       },
       {"tensor 'w'", "non-negative integers"}},
      {"string shape",
       [&] {
         return edited("shape", {"2", 2});
       },
       {"tensor 'w'", "non-negative integers"}},
      {"absurd shape",
       [&] {
         return edited("shape", {1ull << 40, 1ull << 40});
       },
       {"tensor 'w'", "absurdly large"}},
      {"huge dim after a zero",
       [&] {
         return edited("shape", {0ull, 1ull << 63});
       },
       {"tensor 'w'", "absurdly large"}},
      {"offsets missing",
       [&] { return edited("data_offsets", nullptr); },
       {"tensor 'w'", "data_offsets"}},
      {"offsets not ints",
       [&] { return edited("data_offsets", "0-16"); },
       {"tensor 'w'", "two non-negative"}},
      {"three offsets",
       [&] {
         return edited("data_offsets", {0, 8, 16});
       },
       {"tensor 'w'", "two non-negative"}},
      {"negative offset",
       [&] {
         return edited("data_offsets", {-16, 0});
       },
       {"tensor 'w'", "two non-negative"}},
      {"begin after end",
       [&] {
         return edited("data_offsets", {16, 0});
       },
       {"tensor 'w'", "begin after end"}},
      {"offsets past the end",
       [&] { return one_tensor(f32_2x2, 8); },
       {"tensor 'w'", "[0, 16] lie outside the data section of 8 bytes"}},
      {"offsets near 2^64",
       [&] {
         return edited("data_offsets", {~0ull - 4, ~0ull});
       },
       {"tensor 'w'", "outside the data section"}},
      {"size != numel * dtype size",
       [&] { return edited("shape", {3}); },
       {"tensor 'w'", "hold 16 bytes", "needs 12"}},
      {"overlapping tensors",
       [] {
         return safetensors_bytes(
             json{{"a", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}}},
                  {"b", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {4, 12}}}}},
             std::string(12, '\0'));
       },
       {"tensor 'b'", "overlap", "'a'"}},
      {"metadata not an object",
       [] {
         return safetensors_bytes(json{{"__metadata__", {1, 2}}}, "");
       },
       {"__metadata__"}},
      {"metadata value not a string",
       [] {
         return safetensors_bytes(json{{"__metadata__", {{"format", 1}}}}, "");
       },
       {"__metadata__", "'format'"}},
  };
  for (const BadFile& c : cases) {
    SCOPED_TRACE(c.name);
    TempDir dir;
    write_file(dir / "model.safetensors", c.make());
    std::vector<std::string> needles = c.needles;
    needles.push_back((dir / "model.safetensors").string() + ": ");
    expect_input_error([&] { Checkpoint::open(dir.str()); }, needles);
  }
}

TEST(Safetensors, AbsurdHeaderLengthInsideALargeFile) {
  TempDir dir;
  const fs::path p = dir / "model.safetensors";
  const uint64_t n = 150ull << 20;
  write_file(p, safetensors_bytes(std::string(), ""));
  {
    std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
    f.write(reinterpret_cast<const char*>(&n), 8);
  }
  fs::resize_file(p, n + 16);  // sparse: costs no disk space
  expect_input_error([&] { Checkpoint::open(dir.str()); }, {"model.safetensors", "absurdly large"});
}

TEST(Safetensors, NotARegularFile) {
  TempDir dir;
  fs::create_directory(dir / "model.safetensors");
  expect_input_error([&] { Checkpoint::open(dir.str()); },
                     {"model.safetensors", "not a regular file"});
}

// Random corruptions of a small valid file: each must load or throw
// InputError; anything else (a crash, an ASan report, another exception
// type, a tensor pointing outside the file) fails the test.
TEST(Safetensors, RandomlyCorruptedHeadersNeverCrash) {
  const json header = {{"__metadata__", {{"format", "pt"}}},
                       {"a", {{"dtype", "F32"}, {"shape", {2, 3}}, {"data_offsets", {0, 24}}}},
                       {"b", {{"dtype", "BF16"}, {"shape", {4}}, {"data_offsets", {24, 32}}}},
                       {"c", {{"dtype", "I64"}, {"shape", {1, 2}}, {"data_offsets", {32, 48}}}}};
  const std::string valid_header = header.dump(), data(48, '\x11');
  const std::string alphabet =
      "{}[]\",:0123456789-.eE \xff"
      "abcFIBU_";
  std::mt19937 rng(1234);
  TempDir dir;
  const fs::path p = dir / "fuzz.safetensors";
  int loaded = 0, refused = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    std::string h = valid_header;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      const size_t pos = rng() % h.size();
      const char ch = alphabet[rng() % alphabet.size()];
      switch (rng() % 3) {
        case 0:
          h[pos] = ch;
          break;
        case 1:
          h.erase(pos, 1);
          break;
        default:
          h.insert(pos, 1, ch);
          break;
      }
    }
    std::string bytes = safetensors_bytes(h, data);
    if (rng() % 8 == 0) bytes.resize(rng() % bytes.size());
    write_file(p, bytes);
    try {
      const auto f = SafetensorsFile::open(p.string());
      for (const auto& [name, t] : f->tensors()) {
        ASSERT_EQ(t.nbytes, static_cast<size_t>(t.numel()) * dtype_size(t.dtype)) << name;
        // Touching every byte lets ASan catch a view outside the mapping.
        uint8_t sum = 0;
        for (size_t i = 0; i < t.nbytes; ++i) sum += static_cast<const uint8_t*>(t.data)[i];
        EXPECT_EQ(sum, static_cast<uint8_t>(0x11 * t.nbytes))
            << name << ": view outside the data section";
      }
      ++loaded;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(p.string()), std::string::npos) << e.what();
      ++refused;
    }
  }
  std::printf("fuzz: %d loaded, %d refused\n", loaded, refused);
  EXPECT_GT(refused, 1000);  // most edits break the header
  EXPECT_GT(loaded, 20);     // some edits keep the file valid: both paths ran
}

TEST(Checkpoint, BrokenIndexesAndDirectories) {
  const std::string one_a =
      safetensors_bytes(json{{"a", {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {0, 4}}}}},
                        std::string(4, '\0'));
  struct Case {
    std::string name;
    std::map<std::string, std::string> files;
    std::vector<std::string> needles;
  };
  const std::vector<Case> cases = {
      {"index names a missing shard",
       {{"model.safetensors.index.json", R"({"weight_map": {"a": "missing-shard.safetensors"}})"}},
       {"model.safetensors.index.json", "shard 'missing-shard.safetensors'", "does not exist",
        "'a'"}},
      {"index names a tensor absent from its shard",
       {{"s1.safetensors", one_a},
        {"model.safetensors.index.json",
         R"({"weight_map": {"a": "s1.safetensors", "b": "s1.safetensors"}})"}},
       {"model.safetensors.index.json", "tensor 'b'", "shard 's1.safetensors'",
        "not stored there"}},
      {"index is not JSON",
       {{"model.safetensors.index.json", "{\"weight_map\": {"}},
       {"model.safetensors.index.json", "invalid JSON", "line 1"}},
      {"index without weight_map",
       {{"model.safetensors.index.json", R"({"metadata": {}})"}},
       {"model.safetensors.index.json", "weight_map"}},
      {"index with empty weight_map",
       {{"model.safetensors.index.json", R"({"weight_map": {}})"}},
       {"model.safetensors.index.json", "weight_map is empty"}},
      {"shard name not a string",
       {{"model.safetensors.index.json", R"({"weight_map": {"a": 3}})"}},
       {"model.safetensors.index.json", "'a'", "must be a file name, got 3"}},
      {"shard outside the directory",
       {{"model.safetensors.index.json", R"({"weight_map": {"a": "../model.safetensors"}})"}},
       {"model.safetensors.index.json", "'../model.safetensors'", "plain file name"}},
      {"broken shard",
       {{"s1.safetensors", "junk"},
        {"model.safetensors.index.json", R"({"weight_map": {"a": "s1.safetensors"}})"}},
       {"s1.safetensors: file is 4 bytes, too short"}},
      {"tensor in two shards (index)",
       {{"s1.safetensors", one_a},
        {"s2.safetensors", one_a},
        {"model.safetensors.index.json",
         R"({"weight_map": {"a": "s1.safetensors", "x": "s2.safetensors"}})"}},
       {"tensor 'a' is stored in both", "s1.safetensors", "s2.safetensors"}},
      {"tensor in two shards (no index)",
       {{"s1.safetensors", one_a}, {"s2.safetensors", one_a}},
       {"tensor 'a' is stored in both", "s1.safetensors", "s2.safetensors"}},
      {"empty directory",
       {},
       {"no model.safetensors.index.json, model.safetensors or *.safetensors"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TempDir dir;
    for (const auto& [file, content] : c.files) write_file(dir / file, content);
    auto needles = c.needles;
    needles.push_back(dir.str());
    expect_input_error([&] { Checkpoint::open(dir.str()); }, needles);
  }
  TempDir parent;
  const std::string missing = (parent / "no-such-model").string();
  expect_input_error([&] { Checkpoint::open(missing); },
                     {"checkpoint " + missing + ": not a directory"});
}

TEST(Checkpoint, GetChecksShapeAndDtype) {
  const auto ckpt = Checkpoint::open(kStories);
  expect_input_error(
      [&] { ckpt->get("model.norm.weight", {65}); },
      {"checkpoint " + kStories + ": tensor 'model.norm.weight' has shape [64], expected [65]"});
  expect_input_error(
      [&] {
        ckpt->get("model.layers.3.self_attn.k_proj.weight", {64, 64});
      },
      {"tensor 'model.layers.3.self_attn.k_proj.weight' has shape [32, 64], expected [64, 64]"});
  expect_input_error(
      [&] {
        ckpt->get("model.norm.weight", {1, 64});
      },
      {"has shape [64], expected [1, 64]"});
  expect_input_error([&] { ckpt->get("lm_head.weight"); },
                     {"checkpoint " + kStories + ": missing tensor 'lm_head.weight'"});
  expect_input_error(
      [&] {
        ckpt->get("lm_head.weight", {512, 64});
      },
      {"missing tensor 'lm_head.weight'"});

  TempDir dir;
  SafetensorsWriter w;
  const std::string zeros(16, '\0');
  w.add("ids", "I32", {2}, zeros.data(), 8);
  w.add("bytes", "U8", {2}, zeros.data(), 2);
  w.add("half", "F16", {2}, zeros.data(), 4);
  w.write(dir / "model.safetensors");
  const auto c = Checkpoint::open(dir.str());
  expect_input_error([&] { c->get("ids", {2}); },
                     {"tensor 'ids' has dtype I32, expected F32, BF16 or F16"});
  expect_input_error([&] { c->get("bytes", {2}); }, {"tensor 'bytes' has dtype U8"});
  EXPECT_EQ(c->get("ids").dtype, DType::I32);  // the plain get does not judge dtypes
  EXPECT_EQ(c->get("half", {2}).dtype, DType::F16);
}

// A demo-model copy whose weights or config were tampered with: load_model
// (registry + model code) must name the offending tensor.
TEST(LoadModel, MismatchedCheckpointIsRefusedWithTensorName) {
  const auto ckpt = Checkpoint::open(kStories);
  auto write_variant = [&](const fs::path& dir, const std::string& skip, const std::string& reshape,
                           const std::string& retype) {
    for (const char* f :
         {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"}) {
      fs::copy_file(fs::path(kStories) / f, dir / f);
    }
    SafetensorsWriter w;
    for (const std::string& name : ckpt->names()) {
      if (name == skip) continue;
      const TensorInfo& t = ckpt->get(name);
      w.add(name, name == retype ? "I32" : "F32",
            name == reshape ? std::vector<int64_t>{t.numel()} : t.shape, t.data, t.nbytes);
    }
    w.write(dir / "model.safetensors");
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
    auto cfg = json::parse(read_file(dir / "config.json"));
    cfg["architectures"] = {"GPT2LMHeadModel"};
    write_file(dir / "config.json", cfg.dump());
    expect_input_error([&] { load_model(dir.str()); }, {"GPT2LMHeadModel"});
  }
}

}  // namespace
}  // namespace pagoda
