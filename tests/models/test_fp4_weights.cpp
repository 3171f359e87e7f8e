// FP4 experts as DeepSeek V4 publishes them (I8 bytes [out, in/2], two
// e2m1 codes each, + F8_E8M0 `.scale` [out, in/32]): a checkpoint written by
// tools/make_deepseek_v4_checkpoint.py --fp4-experts loads as F4E2M1
// matrices whose rows equal the numpy reference's dequantisation
// (tools/dequantize_tensors.py, deepseek_v4_reference.dequant_fp4), bit for
// bit, and whose linear is the F32 linear of those values; tid2eid (I64)
// loads as int32; tensor-parallel slices keep FP4 on 32-column blocks and
// are exact f32 copies otherwise; malformed tensors are refused naming the
// tensors and the reason.
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "checkpoint_test_util.h"
#include "core/dtype.h"
#include "models/checkpoint.h"
#include "models/linear_weights.h"
#include "models/quantize.h"
#include "models/weights.h"
#include "ops/ops.h"
#include "ops/reference.h"

namespace pagoda::test {
namespace {

const std::string kW1 = "layers.2.ffn.experts.3.w1.weight";  // logical [64, 256]
const std::string kW2 = "layers.2.ffn.experts.3.w2.weight";  // logical [256, 64]
const std::string kTid2eid = "layers.0.ffn.gate.tid2eid";    // [512, 2] of 8 experts

// The tiny V4 checkpoint with FP4 experts, and the numpy reference's view
// of a few of its tensors.
struct V4Fp4 {
  TempDir tmp;
  std::string model = (tmp / "v4").string();
  std::unique_ptr<Checkpoint> ckpt, numpy;

  V4Fp4() {
    const std::string tools = PAGODA_SOURCE_DIR "/tools/";
    const std::string write = "/usr/bin/python3 " + tools +
                              "make_deepseek_v4_checkpoint.py --fp4-experts --dtype f32 --seed 5 "
                              "--out " + model + " > /dev/null";
    EXPECT_EQ(std::system(write.c_str()), 0) << write;
    const std::string deq = "/usr/bin/python3 " + tools + "dequantize_tensors.py " + model + " " +
                            (tmp / "numpy" / "model.safetensors").string() + " " + kW1 + " " +
                            kW2 + " " + kTid2eid;
    fs::create_directories(tmp / "numpy");
    EXPECT_EQ(std::system(deq.c_str()), 0) << deq;
    ckpt = Checkpoint::open(model);
    numpy = Checkpoint::open((tmp / "numpy").string());
  }
};

TEST(Fp4Weights, V4CheckpointLoadsAsTheNumpyReferenceDequantises) {
  V4Fp4 f;
  WeightStore store(*f.ckpt), numpy(*f.numpy);
  for (const auto& [name, rows, cols] :
       {std::tuple{kW1, int64_t{64}, int64_t{256}}, std::tuple{kW2, int64_t{256}, int64_t{64}}}) {
    SCOPED_TRACE(name);
    const ops::Matrix w = store.matrix(name, rows, cols);
    ASSERT_EQ(w.dtype, DType::F4E2M1);
    EXPECT_TRUE(store.in_mapping(w));  // read in place: no copy of the weights
    const ops::Matrix want = numpy.matrix(name, rows, cols);
    ASSERT_EQ(want.dtype, DType::F32);
    std::vector<float> row(cols);
    for (int64_t r = 0; r < rows; ++r) {
      matrix_row_f32(w, r, row.data());
      for (int64_t c = 0; c < cols; ++c)
        ASSERT_EQ(row[c], static_cast<const float*>(want.data)[r * cols + c]) << r << "," << c;
    }
    // The FP4 linear is the F32 linear of numpy's values, bit for bit.
    std::mt19937 rng(1);
    std::normal_distribution<float> d;
    for (int64_t m : {1, 7}) {
      std::vector<float> x(m * cols), y(m * rows), y32(m * rows);
      for (float& v : x) v = d(rng);
      ops::linear(x.data(), m, w, nullptr, y.data());
      ops::linear(x.data(), m, want, nullptr, y32.data());
      EXPECT_EQ(y, y32) << "m " << m;
    }
  }
  // tid2eid: I64 in the file, int32 here, the same ids numpy reads.
  const int32_t* table = store.index_table(kTid2eid, 512, 2, 8);
  const int32_t* want = numpy.index_table(kTid2eid, 512, 2, 8);
  for (int i = 0; i < 1024; ++i) ASSERT_EQ(table[i], want[i]) << i;
  expect_input_error([&] { store.index_table(kTid2eid, 512, 2, 4); },
                     {kTid2eid, "expected 0 to 3"});  // an expert id past n_routed_experts
  expect_input_error([&] { store.index_table(kTid2eid, 512, 3, 8); }, {kTid2eid, "shape"});
  expect_input_error([&] { store.index_table(kW1, 64, 128, 8); }, {kW1, "I8", "I64 or I32"});
}

TEST(Fp4Weights, SlicesStayFp4OnBlocksAndAreExactCopiesOtherwise) {
  V4Fp4 f;
  WeightStore store(*f.ckpt);
  const int64_t rows = 64, cols = 256;
  const ops::Matrix whole = store.matrix(kW1, rows, cols);
  auto check = [&](const ops::Matrix& s, int64_t r0, int64_t c0, DType dtype) {
    ASSERT_EQ(s.dtype, dtype);
    for (int64_t r = 0; r < s.rows; ++r)
      for (int64_t c = 0; c < s.cols; ++c)
        ASSERT_EQ(ops::ref::matrix_at(s, r, c), ops::ref::matrix_at(whole, r0 + r, c0 + c))
            << r << "," << c;
  };
  check(store.row_slice(kW1, rows, cols, 5, 27), 5, 0, DType::F4E2M1);  // any rows
  check(store.row_slice(kW1, rows, cols, 32, 32), 32, 0, DType::F4E2M1);
  check(store.col_slice(kW1, rows, cols, 64, 128), 0, 64, DType::F4E2M1);  // whole blocks
  check(store.col_slice(kW1, rows, cols, 224, 32), 0, 224, DType::F4E2M1);
  check(store.col_slice(kW1, rows, cols, 16, 40), 0, 16, DType::F32);  // exact f32 copy
  check(store.col_slice(kW1, rows, cols, 0, 48), 0, 0, DType::F32);
  // A tensor-parallel split of down (w2, row-parallel over its inputs):
  // the two halves' partial outputs add up to the whole linear's.
  const ops::Matrix w2 = store.matrix(kW2, 256, 64);
  const ops::Matrix a = store.col_slice(kW2, 256, 64, 0, 32), b = store.col_slice(kW2, 256, 64, 32, 32);
  ASSERT_EQ(a.dtype, DType::F4E2M1);
  std::vector<float> x(64), y(256), ya(256), yb(256);
  for (int i = 0; i < 64; ++i) x[i] = 0.01f * static_cast<float>(i % 13) - 0.05f;
  ops::linear(x.data(), 1, w2, nullptr, y.data());
  ops::linear(x.data(), 1, a, nullptr, ya.data());
  ops::linear(x.data() + 32, 1, b, nullptr, yb.data());
  for (int i = 0; i < 256; ++i) EXPECT_NEAR(ya[i] + yb[i], y[i], 1e-5f) << i;
  // int8 requantisation takes FP4 sources (dequantised first).
  const ops::Matrix q = store.quantize_int8(whole, true);
  EXPECT_EQ(q.dtype, DType::I8);
}

// A hand-written FP4 tensor "e.weight" (logical [4, 64]) with whatever
// scale tensor `scale` adds, or a broken weight.
std::unique_ptr<Checkpoint> crafted(const TempDir& dir,
                                    const std::function<void(SafetensorsWriter&)>& add) {
  SafetensorsWriter w;
  add(w);
  w.write(dir / "model.safetensors");
  return Checkpoint::open(dir.str());
}

TEST(Fp4Weights, RefusesBadTensorsNamingThemAndTheReason) {
  const std::vector<uint8_t> bytes(4 * 32, 0x21), scales(4 * 2, 127), nan_scales = {127, 127, 127, 255, 127, 127, 127, 127};
  const std::vector<float> f32_scales(8, 1.0f);
  struct Case {
    std::string what;
    std::function<void(SafetensorsWriter&)> add;
    int64_t cols;
    std::vector<std::string> needles;
  };
  const std::vector<Case> cases = {
      {"missing scale", [&](SafetensorsWriter& w) {
         w.add("e.weight", "I8", {4, 32}, bytes.data(), bytes.size());
       }, 64, {"e.weight", "e.scale", "no scales"}},
      {"scale dtype", [&](SafetensorsWriter& w) {
         w.add("e.weight", "I8", {4, 32}, bytes.data(), bytes.size());
         w.add("e.scale", "F32", {4, 2}, f32_scales.data(), 32);
       }, 64, {"e.weight", "e.scale", "F32", "F8_E8M0"}},
      {"scale shape", [&](SafetensorsWriter& w) {
         w.add("e.weight", "I8", {4, 32}, bytes.data(), bytes.size());
         w.add("e.scale", "F8_E8M0", {4, 1}, scales.data(), 4);
       }, 64, {"e.weight", "e.scale", "[4, 1]", "[4, 2]"}},
      {"NaN scale", [&](SafetensorsWriter& w) {
         w.add("e.weight", "I8", {4, 32}, bytes.data(), bytes.size());
         w.add("e.scale", "F8_E8M0", {4, 2}, nan_scales.data(), 8);
       }, 64, {"e.scale", "NaN", "[1, 1]"}},
      {"byte shape", [&](SafetensorsWriter& w) {  // [rows, cols] bytes: not packed
         w.add("e.weight", "I8", {4, 32}, bytes.data(), bytes.size());
         w.add("e.scale", "F8_E8M0", {4, 2}, scales.data(), 8);
       }, 32, {"e.weight", "[4, 32]", "[4, 16]"}},
      {"partial block", [&](SafetensorsWriter& w) {
         w.add("e.weight", "I8", {4, 32}, bytes.data(), bytes.size());
         w.add("e.scale", "F8_E8M0", {4, 2}, scales.data(), 8);
       }, 48, {"e.weight", "multiple of 32"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    TempDir dir;
    auto ckpt = crafted(dir, c.add);
    WeightStore store(*ckpt);
    expect_input_error([&] { store.matrix("e.weight", 4, c.cols); }, c.needles);
    if (c.cols == 64) {  // slices check the same things
      expect_input_error([&] { store.row_slice("e.weight", 4, 64, 1, 2); }, {"e."});
      expect_input_error([&] { store.col_slice("e.weight", 4, 64, 32, 32); }, {"e."});
    }
  }
  // The well-formed tensor loads, and its values are the codes' (0x21:
  // column 0 = code 1 = 0.5, column 1 = code 2 = 1.0; scale 2^0).
  TempDir dir;
  auto ckpt = crafted(dir, [&](SafetensorsWriter& w) {
    w.add("e.weight", "I8", {4, 32}, bytes.data(), bytes.size());
    w.add("e.scale", "F8_E8M0", {4, 2}, scales.data(), 8);
  });
  WeightStore store(*ckpt);
  const ops::Matrix m = store.matrix("e.weight", 4, 64);
  EXPECT_EQ(ops::ref::matrix_at(m, 3, 62), 0.5f);
  EXPECT_EQ(ops::ref::matrix_at(m, 3, 63), 1.0f);
}

TEST(Fp4Weights, WritersBrokenScaleShapeIsRefused) {
  TempDir tmp;
  const std::string model = (tmp / "v4").string();
  const std::string write = "/usr/bin/python3 " PAGODA_SOURCE_DIR
                            "/tools/make_deepseek_v4_checkpoint.py --fp4-experts --broken "
                            "fp4-scale-shape --out " + model + " > /dev/null";
  ASSERT_EQ(std::system(write.c_str()), 0) << write;
  auto ckpt = Checkpoint::open(model);
  WeightStore store(*ckpt);
  expect_input_error([&] { store.matrix("layers.0.ffn.experts.0.w1.weight", 64, 256); },
                     {"layers.0.ffn.experts.0.w1.scale", "layers.0.ffn.experts.0.w1.weight",
                      "[64, 9]", "[64, 8]"});
}

}  // namespace
}  // namespace pagoda::test
