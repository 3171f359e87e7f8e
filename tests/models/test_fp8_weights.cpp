// FP8 checkpoints as DeepSeek publishes them: F8_E4M3 weights with F32
// `weight_scale_inv` (V3) or F8_E8M0 `.scale` (V4) block scales, loaded by
// WeightStore in place, sliced for tensor parallelism (aligned slices stay
// FP8, others become exact f32 copies), requantised to int8, and refused
// with the tensor and the reason when the scales are missing or wrong.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "checkpoint_test_util.h"
#include "core/dtype.h"
#include "models/checkpoint.h"
#include "models/config.h"
#include "models/quantize.h"
#include "models/weights.h"
#include "ops/ops.h"
#include "ops/reference.h"

namespace pagoda::test {
namespace {

constexpr int64_t kRows = 200, kCols = 300;  // a 2 x 3 grid with partial edge blocks

std::vector<uint8_t> random_codes(int64_t n, std::mt19937& rng) {
  std::uniform_int_distribution<int> code(0, 255);
  std::vector<uint8_t> v(n);
  for (uint8_t& b : v) {
    do b = static_cast<uint8_t>(code(rng));
    while ((b & 0x7f) == 0x7f);
  }
  return v;
}

// A checkpoint with FP8 weights "v3.weight" (+ F32 weight_scale_inv) and
// "v4.weight" (+ F8_E8M0 .scale), and whatever `extra` adds.
struct Fp8Checkpoint {
  TempDir dir;
  std::vector<uint8_t> codes;
  std::vector<float> scales{0.5f, 0.25f, 3.0f, 1e-3f, 7.5f, 0.125f};
  std::vector<uint8_t> e8m0{127, 126, 130, 117, 129, 124};  // 1, 1/2, 8, 2^-10, 4, 1/8
  std::unique_ptr<Checkpoint> ckpt;

  explicit Fp8Checkpoint(const std::function<void(SafetensorsWriter&)>& extra = {}) {
    std::mt19937 rng(7);
    codes = random_codes(kRows * kCols, rng);
    SafetensorsWriter w;
    w.add("v3.weight", "F8_E4M3", {kRows, kCols}, codes.data(), codes.size());
    w.add("v3.weight_scale_inv", "F32", {2, 3}, scales.data(), scales.size() * 4);
    w.add("v4.weight", "F8_E4M3", {kRows, kCols}, codes.data(), codes.size());
    w.add("v4.scale", "F8_E8M0", {2, 3}, e8m0.data(), e8m0.size());
    if (extra) extra(w);
    w.write(dir / "model.safetensors");
    ckpt = Checkpoint::open(dir.str());
  }
};

float expected(const std::vector<uint8_t>& codes, const std::vector<float>& scales, int64_t r,
               int64_t c) {
  return f8e4m3_to_f32(codes[r * kCols + c]) * scales[(r / 128) * 3 + c / 128];
}

TEST(Fp8Weights, V3AndV4ScalesLoadAndDequantise) {
  Fp8Checkpoint f;
  WeightStore store(*f.ckpt);
  const ops::Matrix v3 = store.matrix("v3.weight", kRows, kCols);
  ASSERT_EQ(v3.dtype, DType::F8E4M3);
  EXPECT_TRUE(store.in_mapping(v3));  // read in place: no copy of the weights
  const ops::Matrix v4 = store.matrix("v4.weight", kRows, kCols);
  ASSERT_EQ(v4.dtype, DType::F8E4M3);
  std::vector<float> v4_scales;
  for (uint8_t e : f.e8m0) v4_scales.push_back(std::ldexp(1.0f, e - 127));
  for (int64_t r = 0; r < kRows; r += 7) {
    for (int64_t c = 0; c < kCols; c += 5) {
      ASSERT_EQ(ops::ref::matrix_at(v3, r, c), expected(f.codes, f.scales, r, c)) << r << "," << c;
      ASSERT_EQ(ops::ref::matrix_at(v4, r, c), expected(f.codes, v4_scales, r, c)) << r << "," << c;
    }
  }
  EXPECT_EQ(store.fp8_scales_name("v3.weight"), "v3.weight_scale_inv");
  EXPECT_EQ(store.fp8_scales_name("v4.weight"), "v4.scale");
  EXPECT_EQ(store.fp8_scales_name("nothing.weight"), "");
}

// Every element of a slice equals the whole matrix's element.
void expect_slice_matches(const ops::Matrix& slice, const ops::Matrix& whole, int64_t r0,
                          int64_t c0) {
  for (int64_t r = 0; r < slice.rows; ++r) {
    for (int64_t c = 0; c < slice.cols; ++c) {
      ASSERT_EQ(ops::ref::matrix_at(slice, r, c), ops::ref::matrix_at(whole, r0 + r, c0 + c))
          << r << "," << c;
    }
  }
}

TEST(Fp8Weights, SlicesKeepFp8OnBlockBoundariesAndAreExactOtherwise) {
  Fp8Checkpoint f;
  WeightStore store(*f.ckpt);
  const ops::Matrix whole = store.matrix("v3.weight", kRows, kCols);
  struct Case {
    bool rows;
    int64_t begin, count;
    DType want;
  };
  for (const Case& c : {Case{true, 128, 72, DType::F8E4M3}, Case{true, 0, 128, DType::F8E4M3},
                        Case{true, 50, 100, DType::F32}, Case{false, 128, 172, DType::F8E4M3},
                        Case{false, 0, 256, DType::F8E4M3}, Case{false, 10, 150, DType::F32}}) {
    SCOPED_TRACE(::testing::Message() << (c.rows ? "rows " : "cols ") << c.begin << "+" << c.count);
    const ops::Matrix s = c.rows ? store.row_slice("v3.weight", kRows, kCols, c.begin, c.count)
                                 : store.col_slice("v3.weight", kRows, kCols, c.begin, c.count);
    EXPECT_EQ(s.dtype, c.want);
    EXPECT_EQ(s.rows, c.rows ? c.count : kRows);
    EXPECT_EQ(s.cols, c.rows ? kCols : c.count);
    expect_slice_matches(s, whole, c.rows ? c.begin : 0, c.rows ? 0 : c.begin);
    // And linear agrees bit for bit with the FP8 kernel on the whole matrix.
    std::mt19937 rng(3);
    std::normal_distribution<float> d;
    std::vector<float> x(3 * kCols);
    for (float& v : x) v = d(rng);
    std::vector<float> y_whole(3 * kRows), y(3 * s.rows);
    if (c.rows) {
      ops::linear(x.data(), 3, whole, nullptr, y_whole.data());
      ops::linear(x.data(), 3, s, nullptr, y.data());
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < s.rows; ++j)
          ASSERT_EQ(y[i * s.rows + j], y_whole[i * kRows + c.begin + j]) << i << "," << j;
    }
  }
}

TEST(Fp8Weights, Int8RequantisationEqualsThatOfTheDequantisedMatrix) {
  Fp8Checkpoint f;
  WeightStore store(*f.ckpt);
  const ops::Matrix w = store.matrix("v3.weight", kRows, kCols);
  std::vector<float> deq(kRows * kCols);
  for (int64_t r = 0; r < kRows; ++r) ops::dequantize_fp8_row(w, r, 0, kCols, &deq[r * kCols]);
  std::vector<uint8_t> a(int8_matrix_bytes(kRows, kCols) + 64), b(a.size());
  const ops::Matrix qa = quantize_matrix_int8(w, a.data());
  const ops::Matrix qb = quantize_matrix_int8({deq.data(), DType::F32, kRows, kCols}, b.data());
  ASSERT_EQ(qa.dtype, DType::I8);
  for (int64_t r = 0; r < kRows; ++r) {
    ASSERT_EQ(qa.scales[r], qb.scales[r]) << r;
    ASSERT_EQ(qa.row_sums[r], qb.row_sums[r]) << r;
  }
  EXPECT_EQ(0, std::memcmp(qa.data, qb.data, kRows * kCols));
  // Through the store too (what --quantization int8 does at load).
  const ops::Matrix q = store.quantize_int8(w, false);
  EXPECT_EQ(q.dtype, DType::I8);
  EXPECT_EQ(0, std::memcmp(q.data, qb.data, kRows * kCols));
}

TEST(Fp8Weights, BadScalesAreRefusedNamingTensorAndReason) {
  const std::vector<float> four(4, 1.0f);
  const std::vector<int32_t> ints(6, 1);
  std::vector<float> nan_scales(6, 1.0f);
  nan_scales[4] = NAN;
  std::mt19937 rng(1);
  const auto codes = random_codes(kRows * kCols, rng);
  Fp8Checkpoint f([&](SafetensorsWriter& w) {
    w.add("bare.weight", "F8_E4M3", {kRows, kCols}, codes.data(), codes.size());
    w.add("shape.weight", "F8_E4M3", {kRows, kCols}, codes.data(), codes.size());
    w.add("shape.weight_scale_inv", "F32", {2, 2}, four.data(), 16);
    w.add("ints.weight", "F8_E4M3", {kRows, kCols}, codes.data(), codes.size());
    w.add("ints.weight_scale_inv", "I32", {2, 3}, ints.data(), 24);
    w.add("nan.weight", "F8_E4M3", {kRows, kCols}, codes.data(), codes.size());
    w.add("nan.weight_scale_inv", "F32", {2, 3}, nan_scales.data(), 24);
  });
  WeightStore store(*f.ckpt);
  expect_input_error([&] { store.matrix("bare.weight", kRows, kCols); },
                     {"FP8 tensor 'bare.weight' has no block scales",
                      "'bare.weight_scale_inv'", "'bare.scale'"});
  expect_input_error([&] { store.matrix("shape.weight", kRows, kCols); },
                     {"'shape.weight_scale_inv'", "shape [2, 2], expected [2, 3]",
                      "'shape.weight' [200, 300]"});
  expect_input_error([&] { store.matrix("ints.weight", kRows, kCols); },
                     {"'ints.weight_scale_inv'", "dtype I32", "F8_E8M0"});
  expect_input_error([&] { store.matrix("nan.weight", kRows, kCols); },
                     {"'nan.weight_scale_inv'", "nan", "block [1, 1]"});
  expect_input_error([&] { store.row_slice("bare.weight", kRows, kCols, 0, 128); },
                     {"'bare.weight' has no block scales"});
  expect_input_error([&] { store.matrix("v3.weight", kRows, kCols + 1); },
                     {"tensor 'v3.weight' has shape [200, 300], expected [200, 301]"});
  // An FP8 tensor is not a vector of floats.
  expect_input_error([&] { store.vector("v3.weight", kRows); }, {"'v3.weight'", "F8_E4M3"});
}

}  // namespace
}  // namespace pagoda::test

namespace pagoda::test {
namespace {

ModelConfig load_quantized(const nlohmann::json& quantization_config) {
  TempDir dir;
  const nlohmann::json cfg = {{"architectures", {"DeepseekV3ForCausalLM"}},
                              {"hidden_size", 64},
                              {"intermediate_size", 128},
                              {"num_hidden_layers", 2},
                              {"num_attention_heads", 4},
                              {"vocab_size", 100},
                              {"quantization_config", quantization_config}};
  write_file(dir / "config.json", cfg.dump());
  return load_model_config(dir.str());
}

TEST(Fp8Config, DeepSeekQuantizationConfigIsReadAndOthersRefused) {
  // DeepSeek V3's block as published.
  const ModelConfig c = load_quantized({{"activation_scheme", "dynamic"},
                                        {"fmt", "e4m3"},
                                        {"quant_method", "fp8"},
                                        {"weight_block_size", {128, 128}}});
  EXPECT_EQ(c.quantization.method, "fp8");
  EXPECT_EQ(c.quantization.fmt, "e4m3");
  EXPECT_EQ(c.quantization.weight_block_size, (std::vector<int64_t>{128, 128}));
  EXPECT_EQ(load_quantized(nullptr).quantization.method, "");

  const std::vector<std::pair<nlohmann::json, std::string>> bad = {
      {{{"quant_method", "gptq"}, {"bits", 4}}, "quant_method 'gptq' is not supported"},
      {{{"bits", 4}}, "missing required field 'quantization_config.quant_method'"},
      {{{"quant_method", "fp8"}, {"fmt", "e5m2"}, {"weight_block_size", {128, 128}}},
       "fmt 'e5m2' is not supported"},
      {{{"quant_method", "fp8"}, {"activation_scheme", "static"}, {"weight_block_size", {128, 128}}},
       "activation_scheme 'static' is not supported"},
      {{{"quant_method", "fp8"}}, "missing required field 'quantization_config.weight_block_size'"},
      {{{"quant_method", "fp8"}, {"weight_block_size", {64, 64}}},
       "weight_block_size [64, 64] is not supported"},
      {{{"quant_method", "fp8"}, {"weight_block_size", 128}}, "a list of two integers"},
      {"fp8", "'quantization_config' must be an object or null"},
  };
  for (const auto& entry : bad) {  // (no structured binding: clang 14 cannot capture one)
    const auto& q = entry.first;
    SCOPED_TRACE(q.dump());
    expect_input_error([&] { load_quantized(q); }, {entry.second});
  }
}

}  // namespace
}  // namespace pagoda::test
