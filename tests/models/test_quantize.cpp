// Load-time int8 quantization: the quantized matrices against the scalar
// reference, the memory they leave resident, and the int8 model's logits
// against the unquantized model's (stories260k, f32; a tiny random Qwen3
// checkpoint made by tools/make_tiny_checkpoint.py).
#include <gtest/gtest.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <utility>
#include <random>
#include <string>
#include <vector>

#include "checkpoint_test_util.h"
#include "core/dtype.h"
#include "core/meminfo.h"
#include "forward_test_util.h"
#include "models/model.h"
#include "models/checkpoint.h"
#include "models/quantize.h"
#include "models/weights.h"
#include "ops/packed.h"
#include "ops/reference.h"

namespace pagoda {
namespace {

using test::TempDir;
using test::tiny_checkpoint;

TEST(Quantization, ParsesNamesAndRefusesOthers) {
  EXPECT_EQ(parse_quantization("none"), Quantization::None);
  EXPECT_EQ(parse_quantization("int8"), Quantization::Int8);
  EXPECT_EQ(quantization_name(Quantization::Int8), "int8");
  try {
    parse_quantization("int4");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'int4'"), std::string::npos) << e.what();
  }
}

TEST(Quantization, MatrixRowsMatchTheReference) {
  std::mt19937 rng(2);
  std::normal_distribution<float> d(0.0f, 0.05f);
  for (DType dt : {DType::F32, DType::BF16}) {
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {5, 63}, {17, 1000}, {300, 65}}) {
      std::vector<float> f(rows * cols);
      for (float& x : f) x = d(rng);
      f[0] = 0.0f;
      if (rows > 1) std::fill(f.begin() + cols, f.begin() + 2 * cols, 0.0f);  // a zero row
      std::vector<uint16_t> b(f.size());
      for (size_t i = 0; i < f.size(); ++i) b[i] = f32_to_bf16(f[i]);
      const ops::Matrix src{dt == DType::BF16 ? static_cast<const void*>(b.data()) : f.data(), dt,
                            rows, cols};
      std::vector<uint8_t> buf(int8_matrix_bytes(rows, cols) + 64);
      const ops::Matrix q = quantize_matrix_int8(src, buf.data());
      ASSERT_EQ(q.dtype, DType::I8);
      ASSERT_EQ(q.rows, rows);
      ASSERT_EQ(q.cols, cols);
      std::vector<int8_t> want(cols);
      std::vector<float> row(cols);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) row[c] = ops::ref::matrix_at(src, r, c);
        const float scale = ops::ref::quantize_row_i8(row.data(), cols, want.data());
        const auto* got = static_cast<const int8_t*>(q.data) + r * cols;
        ASSERT_TRUE(std::equal(want.begin(), want.end(), got)) << dtype_name(dt) << " row " << r;
        EXPECT_EQ(q.scales[r], scale) << "row " << r;
        int32_t sum = 0;
        for (int64_t c = 0; c < cols; ++c) sum += want[c];
        EXPECT_EQ(q.row_sums[r], sum) << "row " << r;
        // scale = max|w| / 127 and every value within half a step.
        float amax = 0, worst = 0;
        for (int64_t c = 0; c < cols; ++c) {
          amax = std::max(amax, std::fabs(row[c]));
          worst = std::max(worst, std::fabs(got[c] * scale - row[c]));
        }
        EXPECT_FLOAT_EQ(scale, amax / 127.0f);
        EXPECT_LE(worst, 0.5f * scale * 1.0001f);
      }
      EXPECT_EQ(matrix_bytes(q), static_cast<int64_t>(int8_matrix_bytes(rows, cols)));
    }
  }
}

// max_bytes_ratio: int8 bytes per step over the unquantized model's (int8
// values plus 8 bytes of scale and row sum per row: ~1/4 of f32, ~1/2 of
// bf16 for these narrow rows).
void expect_int8_close(const std::string& dir, double bound, double max_bytes_ratio) {
  auto exact = load_model(dir);
  // Row-major int8 (no panels): these models' few-row matrices would be
  // padded to 64-row panels, and the byte ratio below is about int8 itself
  // (packed int8 gives the same logits bit for bit: test_repack.cpp).
  auto q8 = load_model(dir, parallel::single_process(), {Quantization::Int8, false});
  const double err = test::worst_logit_error(*exact, *q8);
  std::printf("%s: int8 logits worst relative error %.4f (bound %.3f)\n", dir.c_str(), err, bound);
  EXPECT_LE(err, bound) << dir;
  EXPECT_GT(err, 0.0) << "the int8 model gave exactly the float logits: not quantized?";
  EXPECT_LT(static_cast<double>(q8->weight_bytes_per_step()),
            max_bytes_ratio * static_cast<double>(exact->weight_bytes_per_step()))
      << dir;
}

// Measured (worst row over prefill + decode of max |err| / max |logit|):
// stories260k 0.034, tiny random Qwen3 f32 0.027, bf16 tied 0.025 (these
// models have rows of only 64-256 values, the worst case for per-row
// scales); the bound leaves ~2x margin.
TEST(QuantizedModel, Stories260kLogitsCloseToF32) {
  expect_int8_close(PAGODA_MODELS_DIR "/stories260k", 0.06, 0.3);
}

TEST(QuantizedModel, TinyQwen3LogitsCloseToUnquantized) {
  TempDir tmp;
  expect_int8_close(tiny_checkpoint(tmp, "--arch qwen3 --dtype f32 --seed 4"), 0.06, 0.3);
}

TEST(QuantizedModel, TinyQwen3Bf16TiedLogitsCloseToUnquantized) {
  TempDir tmp;
  expect_int8_close(tiny_checkpoint(tmp, "--arch qwen3 --dtype bf16 --tied --seed 5"), 0.06, 0.6);
}

TEST(QuantizedModel, OnlyTheInt8CopiesStayResident) {
  // A bf16 untied model: after loading with int8, the checkpoint pages of
  // the linear layers and the LM head are dropped; what stays is the int8
  // copy (owned), the embedding rows that were read and the norms.
  TempDir tmp;
  const std::string dir = tiny_checkpoint(
      tmp, "--arch llama --dtype bf16 --hidden 256 --intermediate 512 --layers 2 --seed 6");
  auto q8 = load_model(dir, parallel::single_process(), Quantization::Int8);
  const int64_t linear_int8 = q8->weight_bytes_per_step();
  const auto owned = static_cast<int64_t>(q8->owned_weight_bytes());
  EXPECT_GE(owned, linear_int8);
  EXPECT_LT(owned, linear_int8 + linear_int8 / 4);
  // bf16 linear weights are ~2x their int8 size; resident checkpoint bytes
  // must be far below that (embedding 512 x 256 bf16 = 256 KiB at most).
  const int64_t resident = resident_checkpoint_bytes();
  EXPECT_LT(resident, linear_int8 / 2) << "resident " << resident << " int8 " << linear_int8;
}

TEST(QuantizedModel, EmbeddingLookupsLeaveNoPageMapped) {
  // A tied bf16 model with int8 weights: the head is an int8 copy, so
  // lookups read the checkpoint's embedding rows in place; each step unmaps
  // them again, so tokens seen do not add to the resident set (fault-around
  // maps 64 KiB around each row, which would add up to the whole table).
  // Both ways of release_rows: the 59-token prefill's windows would cover
  // the 256 KiB table (released whole, once), each decode step's one row
  // is released as its own window.
  TempDir tmp;
  const std::string dir = tiny_checkpoint(
      tmp, "--arch qwen3 --dtype bf16 --tied --hidden 256 --intermediate 512 --layers 2 --seed 3");
  auto q8 = load_model(dir, parallel::single_process(), Quantization::Int8);
  const int64_t after_load = resident_checkpoint_bytes();
  std::vector<int32_t> prompt;
  for (int32_t t = 1; t < 60; ++t) prompt.push_back(t * 8 % q8->config().vocab_size);
  test::prefill_and_decode(*q8, prompt, 511);
  EXPECT_EQ(resident_checkpoint_bytes(), after_load);
}

// How many of the whole pages inside [p, p + n) are mapped in this process
// (/proc/self/pagemap's "present" bit, readable without privileges).
int64_t pages_present(const void* p, size_t n) {
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(p);
  const int fd = open("/proc/self/pagemap", O_RDONLY);
  int64_t present = 0;
  for (uintptr_t a = (begin + page - 1) / page * page; a + page <= begin + n; a += page) {
    uint64_t entry = 0;
    EXPECT_EQ(pread(fd, &entry, sizeof entry, static_cast<off_t>(a / page * sizeof entry)),
              static_cast<ssize_t>(sizeof entry));
    present += static_cast<int64_t>(entry >> 63);
  }
  close(fd);
  return present;
}

TEST(WeightStore, ReleasedRowsLeaveTheNeighbouringTensorsMapped) {
  // An embedding table read in place between two other tensors: releasing
  // the fault-around windows of its first and last rows (64 KiB each, which
  // reach into both neighbours) must unmap only the table's own pages.
  TempDir tmp;
  const int64_t rows = 64, cols = 4096;  // 8 KiB rows; two rows' windows are less than the table
  std::vector<uint16_t> before(64 << 10, 1), table(rows * cols, 2), after(64 << 10, 3);
  test::SafetensorsWriter w;
  w.add("before", "BF16", {int64_t(before.size())}, before.data(), before.size() * 2);
  w.add("table", "BF16", {rows, cols}, table.data(), table.size() * 2);
  w.add("after", "BF16", {int64_t(after.size())}, after.data(), after.size() * 2);
  w.write(tmp / "model.safetensors", 8);
  auto ckpt = Checkpoint::open(tmp.str());
  WeightStore store(*ckpt);
  const ops::Matrix m = store.matrix("table", rows, cols);
  ASSERT_TRUE(store.in_mapping(m));
  uint64_t sum = 0;  // fault in every page of the file's tensors
  for (const char* name : {"before", "table", "after"}) {
    const TensorInfo& t = ckpt->get(name);
    for (size_t i = 0; i < t.nbytes; i += 64) sum += static_cast<const uint8_t*>(t.data)[i];
  }
  EXPECT_GT(sum, 0u);
  const TensorInfo &b = ckpt->get("before"), &a = ckpt->get("after");
  const int64_t before_pages = pages_present(b.data, b.nbytes),
                after_pages = pages_present(a.data, a.nbytes);
  ASSERT_GT(before_pages, 0);
  ASSERT_GT(after_pages, 0);
  std::vector<int64_t> released{rows - 1, 0};
  store.release_rows(m, released);
  EXPECT_EQ(pages_present(b.data, b.nbytes), before_pages);
  EXPECT_EQ(pages_present(a.data, a.nbytes), after_pages);
  // Whole pages of the released rows are gone; the middle of the table stays.
  EXPECT_EQ(pages_present(m.data, cols * 2), 0);
  EXPECT_EQ(pages_present(static_cast<const uint16_t*>(m.data) + (rows - 1) * cols, cols * 2), 0);
  EXPECT_GT(pages_present(static_cast<const uint16_t*>(m.data) + rows / 2 * cols, cols * 2), 0);
  // Enough rows that their windows would cover the table (9 x 64 KiB): the
  // whole table goes, in one call.
  std::vector<int64_t> many{63, 1, 8, 16, 24, 32, 40, 48, 56};
  store.release_rows(m, many);
  EXPECT_EQ(pages_present(m.data, rows * cols * 2), 0);
  EXPECT_EQ(pages_present(b.data, b.nbytes), before_pages);
  EXPECT_EQ(pages_present(a.data, a.nbytes), after_pages);
}

// The start of the mapping that holds p and its VmFlags (/proc/self/smaps).
std::pair<uintptr_t, std::string> mapping_of(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  uintptr_t start = 0;
  bool here = false;
  while (std::getline(smaps, line)) {
    uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(' ') > line.find('-')) {
      here = reinterpret_cast<uintptr_t>(p) >= lo && reinterpret_cast<uintptr_t>(p) < hi;
      start = lo;
    } else if (here && line.rfind("VmFlags:", 0) == 0) {
      return {start, line};
    }
  }
  return {0, ""};
}

TEST(WeightStore, CopiesOfAHugePageOrMoreGetTheirOwnHugePageMapping) {
  // An int8 copy streamed every decode step: on a mapping of its own that
  // starts on a huge-page boundary with MADV_HUGEPAGE ("hg"), not advice
  // over a heap buffer, which would split the heap's mapping around it.
  TempDir tmp;
  const int64_t rows = 1024, cols = 2048;  // a 2 MiB int8 copy
  std::vector<uint16_t> w(rows * cols, 0x3f80);
  test::SafetensorsWriter writer;
  writer.add("w", "BF16", {rows, cols}, w.data(), w.size() * 2);
  writer.write(tmp / "model.safetensors", 8);
  auto ckpt = Checkpoint::open(tmp.str());
  WeightStore store(*ckpt);
  const ops::Matrix q = store.quantize_int8(store.matrix("w", rows, cols), false);
  ASSERT_EQ(q.dtype, DType::I8);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(q.data) % kHugePageBytes, 0u);
  const auto [start, flags] = mapping_of(q.data);
  EXPECT_EQ(start % kHugePageBytes, 0u) << flags;
  EXPECT_NE((flags + " ").find(" hg "), std::string::npos) << flags;
}

TEST(WeightStore, RepackedMatricesShareHugePageSlabs) {
  // Matrices a decode step streams (repacked panels), however small: one
  // after another in a huge-page mapping, so a 1 MiB matrix, or the last
  // MiB of a 3 MiB one, does not stream from 4 KiB pages.
  TempDir tmp;
  const int64_t rows = 512, cols = 1024;  // 1 MiB bf16 panels each
  std::vector<uint16_t> w(rows * cols, 0x3f80);
  test::SafetensorsWriter writer;
  for (const char* name : {"a", "b", "c"})
    writer.add(name, "BF16", {rows, cols}, w.data(), w.size() * 2);
  writer.write(tmp / "model.safetensors", 8);
  auto ckpt = Checkpoint::open(tmp.str());
  WeightStore store(*ckpt);
  std::vector<const uint8_t*> starts;
  for (const char* name : {"a", "b", "c"}) {
    const ops::Matrix p = store.repack(store.matrix(name, rows, cols), false);
    ASSERT_TRUE(p.packed);
    starts.push_back(static_cast<const uint8_t*>(p.data));
    const auto [start, flags] = mapping_of(p.data);
    EXPECT_NE((flags + " ").find(" hg "), std::string::npos) << name << ": " << flags;
  }
  EXPECT_EQ(reinterpret_cast<uintptr_t>(starts[0]) % kHugePageBytes, 0u);
  const auto stride =  // carved one after another, 64-byte aligned
      static_cast<ptrdiff_t>(ops::packed_bytes(rows, cols, DType::BF16) + 63) / 64 * 64;
  for (size_t i = 1; i < starts.size(); ++i) EXPECT_EQ(starts[i] - starts[i - 1], stride);
}

}  // namespace
}  // namespace pagoda
