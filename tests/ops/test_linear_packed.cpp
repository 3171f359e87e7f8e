// Packed bf16 and int8 weights (ops/packed.h): the layout itself, linear over
// it on every supported ISA (native vdpbf16ps / vpdpbusd kernel or the portable loop)
// against the reference on the row-major source, batch invariance, and
// the other readers of a packed matrix (linear_multi, embedding).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"
#include "ops/ops.h"
#include "ops/packed.h"
#include "ops/reference.h"
#include "ops_test_util.h"

namespace pagoda::ops::testing {
namespace {

// A row-major bf16 matrix and its packed copy.
struct PackedPair {
  std::vector<uint16_t> row_major;
  std::vector<uint16_t> panels;
  Matrix source, packed;

  PackedPair(int64_t n, int64_t k, std::mt19937& rng)
      : row_major(to_bf16(random_vec(n * k, rng))),
        panels(packed_bytes(n, k, DType::BF16) / 2, 0xFFFF),  // pad must be overwritten with zeros
        source{row_major.data(), DType::BF16, n, k} {
    packed = pack_matrix(source, panels.data());
  }
};

TEST(PackBf16, EveryWeightLandsWhereTheLayoutSaysAndPadRowsAreZero) {
  std::mt19937 rng(21);
  const int64_t n = 98, k = 10;  // panels of 48, 48 and 16 columns, the last with 2 rows
  PackedPair w(n, k, rng);
  EXPECT_TRUE(w.packed.packed);
  EXPECT_EQ(w.packed.rows, n);
  EXPECT_EQ(w.packed.cols, k);
  std::vector<bool> written(w.panels.size(), false);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      // The layout by its definition: panel r / 48 (after the full panels
      // before it; the last one 16 columns wide), pair c / 2, column r % 48.
      const int64_t panel = r / 48, pair = c / 2, lane = r % 48, width = panel == 2 ? 16 : 48;
      const int64_t index = panel * 48 * k + (pair * width + lane) * 2 + c % 2;
      ASSERT_EQ(packed_index(r, c, n, k), index);
      EXPECT_EQ(w.panels[index], w.row_major[r * k + c]) << r << "," << c;
      EXPECT_EQ(ref::matrix_at(w.packed, r, c), ref::matrix_at(w.source, r, c));
      written[index] = true;
    }
  }
  for (size_t i = 0; i < w.panels.size(); ++i) {
    if (!written[i]) {
      EXPECT_EQ(w.panels[i], 0) << "pad element " << i;
    }
  }
}

TEST(PackBf16, RefusesOddColsAndOtherDtypes) {
  std::vector<uint16_t> data(3 * 5), out(packed_bytes(3, 6, DType::BF16) / 2);
  EXPECT_THROW(pack_matrix(Matrix{data.data(), DType::BF16, 3, 5}, out.data()), InternalError);
  std::vector<float> f(3 * 6);
  EXPECT_THROW(pack_matrix(Matrix{f.data(), DType::F32, 3, 6}, out.data()), InternalError);
}

class LinearPacked : public IsaTest {};

TEST_P(LinearPacked, MatchesReferenceOnTheRowMajorSource) {
  // The same error model as the row-major bf16 test: f32 accumulation error
  // scaled by sum |x * w|; x is rounded to bf16 where the ISA does so (a
  // native packed kernel of a bf16 dot-product ISA: without one, as on
  // neonbf16, the portable loop keeps f32 activations).
  const bool rounds = rounds_bf16_activations(GetParam()) && packed_bf16_is_native();
  std::mt19937 rng(22);
  for (int64_t k : {2, 34, 1100}) {  // 1100: two k blocks of the native kernel
    // Last panels of 1-3 vectors (16 to 48 columns), whole or cut.
    for (int64_t n : {1, 47, 48, 49, 64, 80, 200}) {
      PackedPair w(n, k, rng);
      const auto bias = random_vec(n, rng);
      for (int64_t m : {1, 5, 7, 8, 9, 17}) {
        const auto x_in = random_vec(m * k, rng);
        const auto x = rounds ? bf16_rounded(x_in) : x_in;
        const int64_t ldy = n + 3;  // a wider output row: columns past n untouched
        for (const float* b : {static_cast<const float*>(nullptr), bias.data()}) {
          std::vector<float> y(m * ldy, -7.0f), y_ref(m * ldy, -7.0f);
          linear(x_in.data(), m, w.packed, b, y.data(), ldy);
          ref::linear(x.data(), m, w.source, b, y_ref.data(), ldy);
          int bad = 0;
          for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = 0; j < ldy; ++j) {
              if (j >= n) {
                if (y[i * ldy + j] != -7.0f) ++bad;
                continue;
              }
              double mag = b ? std::fabs(b[j]) : 0.0;
              for (int64_t t = 0; t < k; ++t) {
                mag += std::fabs(double{x[i * k + t]} * ref::matrix_at(w.source, j, t));
              }
              const double err = std::fabs(double{y[i * ldy + j]} - y_ref[i * ldy + j]);
              if (!(err <= 1e-5 * mag + 1e-30)) ++bad;
            }
          }
          EXPECT_EQ(bad, 0) << "k=" << k << " n=" << n << " m=" << m << " bias=" << (b != nullptr);
        }
      }
    }
  }
}

TEST_P(LinearPacked, RowsEqualDecodeRowsBitForBit) {
  // Every row of a batched call (8-row tiles, remainder tiles, the cut last
  // panel, two k blocks) equals the same row computed alone, on 1 and 2
  // threads: greedy outputs cannot depend on batch composition.
  std::mt19937 rng(23);
  for (int64_t k : {34, 1100}) {
    for (int64_t n : {65, 80, 389}) {
      PackedPair w(n, k, rng);
      const int64_t max_m = 70;
      const auto x = random_vec(max_m * k, rng);
      const auto bias = random_vec(n, rng);
      std::vector<float> alone(max_m * n);
      for (int64_t r = 0; r < max_m; ++r) {
        linear(x.data() + r * k, 1, w.packed, bias.data(), &alone[r * n]);
      }
      for (int threads : {1, 2}) {
        ScopedThreads scoped(threads);
        // Remainder tiles of 1 to 7 rows alone (2-7: a batched decode step's
        // one pass over a block), after one full tile (9, 12, 15) or more.
        for (int64_t m : {2, 3, 5, 7, 8, 9, 12, 15, 16, 17, 62, 64, 65, 70}) {
          std::vector<float> batched(m * n, NAN);
          linear(x.data(), m, w.packed, bias.data(), batched.data());
          EXPECT_TRUE(std::equal(batched.begin(), batched.end(), alone.begin()))
              << "k=" << k << " n=" << n << " m=" << m << " threads=" << threads;
        }
      }
    }
  }
}

// The ISAs whose packed bf16 kernel widens panels to f32 (the others run a
// different kernel, with its own promises above).
class LinearPackedWidened : public IsaTest {};

std::vector<Isa> widened_isas() {
  std::vector<Isa> out;
  for (Isa isa : supported_isas()) {
    if (isa == Isa::Avx2 || isa == Isa::Avx2Vnni || isa == Isa::Avx512) out.push_back(isa);
  }
  return out;
}

TEST_P(LinearPackedWidened, PanelsAreTheirPromisedFmaChainBitForBit) {
  // The kernels that widen panels to f32 (AVX2 ymm, AVX-512 without BF16
  // zmm: packed_widen_impl.h) promise output [r, c] = one chain over the
  // pairs in order, fma(x[2p], w_even) then fma(x[2p + 1], w_odd), from +0,
  // then + bias: rebuilt here with std::fma, so the two vector widths give
  // the same bits (and the tile shapes, k blocks and cut panels do not
  // show).
  std::mt19937 rng(27);
  for (int64_t k : {2, 34, 1100}) {  // 1100: several k blocks of both kernels
    for (int64_t n : {1, 48, 49, 80, 200}) {
      PackedPair w(n, k, rng);
      const auto bias = random_vec(n, rng);
      for (int64_t m : {1, 2, 5, 6, 8, 9, 13, 17}) {  // every tile height of 5- and 6-row tiles
        const auto x = random_vec(m * k, rng);
        std::vector<float> y(m * n), want(m * n);
        linear(x.data(), m, w.packed, bias.data(), y.data());
        for (int64_t r = 0; r < m; ++r) {
          for (int64_t c = 0; c < n; ++c) {
            float acc = 0.0f;
            for (int64_t p = 0; p < k / 2; ++p) {
              acc = std::fma(x[r * k + 2 * p], bf16_to_f32(w.row_major[c * k + 2 * p]), acc);
              acc =
                  std::fma(x[r * k + 2 * p + 1], bf16_to_f32(w.row_major[c * k + 2 * p + 1]), acc);
            }
            want[r * n + c] = acc + bias[c];
          }
        }
        EXPECT_EQ(y, want) << "k=" << k << " n=" << n << " m=" << m;
      }
    }
  }
}

TEST_P(LinearPacked, LinearMultiMixingPackedAndRowMajorEqualsSeparateCalls) {
  std::mt19937 rng(24);
  const int64_t k = 96, m = 9;
  PackedPair a(100, k, rng), b(48, k, rng);
  const auto row_major = to_bf16(random_vec(40 * k, rng));
  const Matrix c{row_major.data(), DType::BF16, 40, k};
  const auto x = random_vec(m * k, rng);
  const auto bias = random_vec(100, rng);
  std::vector<float> ya(m * 100), yb(m * 48), yc(m * 40);
  const LinearOutput outs[3] = {{&a.packed, bias.data(), ya.data()},
                                {&b.packed, nullptr, yb.data()},
                                {&c, nullptr, yc.data()}};
  linear_multi(x.data(), m, outs, 3);
  std::vector<float> ea(m * 100), eb(m * 48), ec(m * 40);
  linear(x.data(), m, a.packed, bias.data(), ea.data());
  linear(x.data(), m, b.packed, nullptr, eb.data());
  linear(x.data(), m, c, nullptr, ec.data());
  EXPECT_EQ(ya, ea);
  EXPECT_EQ(yb, eb);
  EXPECT_EQ(yc, ec);
}

TEST_P(LinearPacked, EmbeddingOfAPackedTableEqualsTheRowMajorOne) {
  std::mt19937 rng(25);
  PackedPair table(150, 12, rng);  // a tied LM head's packed copy
  const int32_t ids[] = {0, 47, 48, 149, 7};
  std::vector<float> got(5 * 12), want(5 * 12);
  embedding(ids, 5, table.packed, got.data());
  ref::embedding(ids, 5, table.source, want.data());
  EXPECT_EQ(got, want);
}

TEST_P(LinearPacked, Int8PanelsEqualRowMajorInt8BitForBit) {
  // Packed int8 (4 inputs per word, for vpdpbusd) computes the same exact
  // integer dots and the same epilogue as the row-major int8 kernel.
  std::mt19937 rng(26);
  std::uniform_int_distribution<int> byte(-127, 127);
  for (int64_t k : {4, 64, 1028}) {
    for (int64_t n : {1, 63, 64, 65, 130}) {
      std::vector<int8_t> q(n * k);
      for (auto& v : q) v = static_cast<int8_t>(byte(rng));
      const auto scales = random_vec(n, rng, 0.01f);
      std::vector<int32_t> sums(n, 0);
      for (int64_t r = 0; r < n; ++r) {
        for (int64_t c = 0; c < k; ++c) sums[r] += q[r * k + c];
      }
      const Matrix row_major{q.data(), DType::I8, n, k, scales.data(), sums.data()};
      std::vector<int8_t> panels(packed_bytes(n, k, DType::I8), 0x55);
      const Matrix packed = pack_matrix(row_major, panels.data());
      ASSERT_TRUE(packed.packed);
      for (int64_t r = 0; r < n; r += 7) {
        for (int64_t c = 0; c < k; ++c) {
          ASSERT_EQ(panels[packed_index(r, c, n, k, DType::I8)], q[r * k + c]) << r << "," << c;
        }
      }
      const auto bias = random_vec(n, rng);
      for (int64_t m : {1, 5, 6, 7, 13}) {
        const auto x = random_vec(m * k, rng);
        const int64_t ldy = n + 2;
        std::vector<float> got(m * ldy, -7.0f), want(m * ldy, -7.0f);
        linear(x.data(), m, packed, bias.data(), got.data(), ldy);
        linear(x.data(), m, row_major, bias.data(), want.data(), ldy);
        EXPECT_EQ(got, want) << "k=" << k << " n=" << n << " m=" << m;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllSupported, LinearPacked, ::testing::ValuesIn(supported_isas()),
                         isa_test_name);
INSTANTIATE_TEST_SUITE_P(AllSupported, LinearPackedWidened, ::testing::ValuesIn(widened_isas()),
                         isa_test_name);
// None on a CPU without AVX2 (AArch64, or x86 without it).
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(LinearPackedWidened);

}  // namespace
}  // namespace pagoda::ops::testing
