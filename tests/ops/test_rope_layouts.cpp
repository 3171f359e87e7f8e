// ops::rope with RopeParams: both pair layouts, a slice of each head at an
// offset ("rope first" / "rope last"), token strides and the inverse
// rotation, on every ISA, against ref::rope and against unit vectors that
// pin down which elements pair (spec §6.3 invariant 13).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/ops.h"
#include "ops/reference.h"
#include "ops_test_util.h"

namespace pagoda::ops::testing {
namespace {

std::vector<float> frequencies(int rot_dim) {
  std::vector<float> f(rot_dim / 2);
  for (int i = 0; i < rot_dim / 2; ++i) f[i] = std::pow(10000.0f, -2.0f * i / rot_dim);
  return f;
}

class RopeLayouts : public IsaTest {};

TEST_P(RopeLayouts, MatchesReference) {
  std::mt19937 rng(21);
  struct Case {
    int heads, head_dim, offset, rot_dim;
    int64_t token_stride;
  };
  // DeepSeek q (192, last 64), k_pe inside a 576-wide row, the V3.2
  // indexer (first 64 of 128), odd vector tails, a padded token stride.
  const Case cases[] = {{4, 192, 128, 64, 0}, {1, 576, 512, 64, 0}, {3, 128, 0, 64, 0},
                        {2, 40, 6, 18, 0},    {5, 24, 2, 20, 130},  {1, 8, 0, 8, 0}};
  for (const Case& c : cases) {
    for (RopeLayout layout : {RopeLayout::NeoX, RopeLayout::Interleaved}) {
      for (bool inverse : {false, true}) {
        const std::string what = std::to_string(c.head_dim) + "/" + std::to_string(c.offset) +
                                 "+" + std::to_string(c.rot_dim) +
                                 (layout == RopeLayout::NeoX ? " neox" : " interleaved") +
                                 (inverse ? " inverse" : "");
        const int64_t tokens = 7;
        const int64_t stride = c.token_stride ? c.token_stride : int64_t{c.heads} * c.head_dim;
        auto x = random_vec(tokens * stride, rng);
        auto x_ref = x;
        const std::vector<int32_t> pos{0, 1, 2, 17, 300, 4095, 70000};
        const auto inv_freq = frequencies(c.rot_dim);
        const RopeParams p{c.heads, c.head_dim, c.token_stride, c.offset, c.rot_dim, layout,
                           inverse};
        rope(x.data(), tokens, pos.data(), inv_freq.data(), p);
        ref::rope(x_ref.data(), tokens, pos.data(), inv_freq.data(), p);
        expect_close(x, x_ref, 2e-5f, what);
      }
    }
  }
}

// A unit vector at element e of a head, rotated at position 1 with
// frequency 1 for every pair: the result is cos(1) at e and +-sin(1) at its
// partner, nothing anywhere else.
std::vector<float> rotate_unit(RopeLayout layout, int head_dim, int offset, int rot_dim, int e,
                               bool inverse = false) {
  std::vector<float> x(2 * head_dim, 0.0f);  // two heads: the second must stay zero
  x[e] = 1.0f;
  const std::vector<float> ones(rot_dim / 2, 1.0f);
  const int32_t pos = 1;
  rope(x.data(), 1, &pos, ones.data(), RopeParams{2, head_dim, 0, offset, rot_dim, layout, inverse});
  return x;
}

TEST_P(RopeLayouts, UnitVectorsShowThePairing) {
  const float c = std::cos(1.0f), s = std::sin(1.0f);
  const int hd = 24, rot = 8;
  for (int offset : {0, hd - rot}) {  // rope first (V3.2 indexer), rope last (MLA)
    for (int j = 0; j < rot; ++j) {
      const int e = offset + j;
      // Interleaved: (2i, 2i + 1). NeoX: (i, i + rot / 2).
      const int inter_partner = offset + (j ^ 1);
      const bool inter_first = j % 2 == 0;
      const int neox_partner = offset + (j < rot / 2 ? j + rot / 2 : j - rot / 2);
      const bool neox_first = j < rot / 2;
      for (auto [layout, partner, first] :
           {std::tuple{RopeLayout::Interleaved, inter_partner, inter_first},
            std::tuple{RopeLayout::NeoX, neox_partner, neox_first}}) {
        for (bool inverse : {false, true}) {
          const auto y = rotate_unit(layout, hd, offset, rot, e, inverse);
          // The first of a pair (a) goes to a c at a and a s at b; the
          // second (b) to b c at b and -b s at a; inverse flips s.
          const float at_partner = (first ? s : -s) * (inverse ? -1.0f : 1.0f);
          for (int k = 0; k < 2 * hd; ++k) {
            const float want = k == e ? c : k == partner ? at_partner : 0.0f;
            ASSERT_NEAR(y[k], want, 1e-6f) << "offset " << offset << " element " << e
                                           << " layout " << static_cast<int>(layout) << " at "
                                           << k << (inverse ? " inverse" : "");
          }
        }
      }
    }
    // Outside the slice nothing moves, in either layout.
    for (int e : {offset == 0 ? rot : 0, offset == 0 ? hd - 1 : offset - 1}) {
      for (RopeLayout layout : {RopeLayout::NeoX, RopeLayout::Interleaved}) {
        const auto y = rotate_unit(layout, hd, offset, rot, e);
        for (int k = 0; k < 2 * hd; ++k) ASSERT_EQ(y[k], k == e ? 1.0f : 0.0f) << e << "," << k;
      }
    }
  }
}

TEST_P(RopeLayouts, InverseUndoesTheRotation) {
  std::mt19937 rng(22);
  const auto x0 = random_vec(5 * 3 * 192, rng);
  auto x = x0;
  const std::vector<int32_t> pos{3, 9, 100, 1000, 65000};
  const auto inv_freq = frequencies(64);
  for (RopeLayout layout : {RopeLayout::NeoX, RopeLayout::Interleaved}) {
    RopeParams p{3, 192, 0, 128, 64, layout};
    rope(x.data(), 5, pos.data(), inv_freq.data(), p);
    p.inverse = true;
    rope(x.data(), 5, pos.data(), inv_freq.data(), p);
    expect_close(x, x0, 1e-5f, "inverse");
  }
}

TEST_P(RopeLayouts, NeoXOnWholeHeadsAgreesWithPlainRope) {
  std::mt19937 rng(23);
  const int tokens = 4, heads = 3, hd = 64;
  auto a = random_vec(tokens * heads * hd, rng);
  auto b = a;
  const std::vector<int32_t> pos{0, 5, 77, 1024};
  const auto inv_freq = frequencies(hd);
  rope(a.data(), tokens, heads, hd, pos.data(), inv_freq.data(), hd);
  rope(b.data(), tokens, pos.data(), inv_freq.data(), RopeParams{heads, hd, 0, 0, hd});
  expect_close(a, b, 1e-6f, "neox");
}

TEST_P(RopeLayouts, RefusesSlicesOutsideTheHead) {
  std::vector<float> x(64);
  const std::vector<float> f(16, 1.0f);
  const int32_t pos = 0;
  EXPECT_THROW(rope(x.data(), 1, &pos, f.data(), RopeParams{1, 32, 0, 8, 32}), InternalError);
  EXPECT_THROW(rope(x.data(), 1, &pos, f.data(), RopeParams{1, 32, 0, 0, 7}), InternalError);
}

INSTANTIATE_TEST_SUITE_P(AllSupported, RopeLayouts, ::testing::ValuesIn(supported_isas()),
                         isa_test_name);

class LayerNorm : public IsaTest {};

TEST_P(LayerNorm, MatchesReference) {
  std::mt19937 rng(31);
  for (int64_t n : {1, 7, 16, 33, 128, 7168}) {
    for (bool with_bias : {false, true}) {
      const int64_t m = 5;
      auto x = random_vec(m * n, rng, 2.0f);
      for (int64_t i = 0; i < m * n; ++i) x[i] += 30.0f;  // a large mean: needs two passes
      const auto w = random_vec(n, rng);
      const auto b = random_vec(n, rng);
      std::vector<float> y(m * n), want(m * n);
      layer_norm(x.data(), w.data(), with_bias ? b.data() : nullptr, m, n, 1e-6f, y.data());
      ref::layer_norm(x.data(), w.data(), with_bias ? b.data() : nullptr, m, n, 1e-6f,
                      want.data());
      expect_close(y, want, 1e-4f, "layer_norm n " + std::to_string(n));
      // In place.
      layer_norm(x.data(), w.data(), with_bias ? b.data() : nullptr, m, n, 1e-6f, x.data());
      EXPECT_EQ(x, y);
    }
  }
}

TEST_P(LayerNorm, NormalisesToZeroMeanUnitVariance) {
  // Weight 1, bias 0: every output row has mean 0 and variance 1 (up to eps).
  std::mt19937 rng(32);
  const int64_t m = 3, n = 100;
  const auto x = random_vec(m * n, rng, 5.0f);
  const std::vector<float> ones(n, 1.0f);
  std::vector<float> y(m * n);
  layer_norm(x.data(), ones.data(), nullptr, m, n, 1e-6f, y.data());
  for (int64_t r = 0; r < m; ++r) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < n; ++j) mean += y[r * n + j];
    mean /= n;
    for (int64_t j = 0; j < n; ++j) var += (y[r * n + j] - mean) * (y[r * n + j] - mean);
    EXPECT_NEAR(mean, 0.0, 1e-5);
    EXPECT_NEAR(var / n, 1.0, 1e-4);
  }
}

INSTANTIATE_TEST_SUITE_P(AllSupported, LayerNorm, ::testing::ValuesIn(supported_isas()),
                         isa_test_name);

}  // namespace
}  // namespace pagoda::ops::testing
