// YaRN (rope_scaling "yarn" / "deepseek_yarn"): config parsing with
// transformers' defaults, the correction range and inv_freq against values
// computed here from spec §0.3's formulas in double, the mscale helpers
// against DeepSeek V3's published softmax scale, and the Llama family's
// refusal (its fused RoPE has no cos/sin factor).
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <vector>

#include "checkpoint_test_util.h"
#include "models/config.h"
#include "models/model.h"
#include "models/rope.h"

namespace pagoda::test {
namespace {

using nlohmann::json;

ModelConfig load_with(const json& rope_scaling, int64_t max_pos = 163840) {
  TempDir dir;
  const json cfg = {{"architectures", {"DeepseekV3ForCausalLM"}},
                    {"hidden_size", 64},
                    {"intermediate_size", 128},
                    {"num_hidden_layers", 2},
                    {"num_attention_heads", 4},
                    {"vocab_size", 100},
                    {"max_position_embeddings", max_pos},
                    {"rope_scaling", rope_scaling}};
  write_file(dir / "config.json", cfg.dump());
  return load_model_config(dir.str());
}

// DeepSeek V3's block as published.
const json kV3Scaling = {{"beta_fast", 32},  {"beta_slow", 1},     {"factor", 40},
                         {"mscale", 1.0},    {"mscale_all_dim", 1.0},
                         {"original_max_position_embeddings", 4096}, {"type", "yarn"}};

TEST(Yarn, ConfigParsesDeepSeekV3AndDefaults) {
  const RopeScaling s = load_with(kV3Scaling).rope_scaling;
  EXPECT_TRUE(s.is_yarn());
  EXPECT_EQ(s.factor, 40.0);
  EXPECT_EQ(s.original_max_position_embeddings, 4096);
  EXPECT_EQ(s.beta_fast, 32.0);
  EXPECT_EQ(s.beta_slow, 1.0);
  EXPECT_EQ(s.mscale, 1.0);
  EXPECT_EQ(s.mscale_all_dim, 1.0);

  const RopeScaling d = load_with({{"rope_type", "deepseek_yarn"}, {"factor", 4}}, 2048).rope_scaling;
  EXPECT_EQ(d.type, "deepseek_yarn");
  EXPECT_TRUE(d.is_yarn());
  EXPECT_EQ(d.beta_fast, 32.0);
  EXPECT_EQ(d.beta_slow, 1.0);
  EXPECT_EQ(d.mscale, 1.0);
  EXPECT_EQ(d.mscale_all_dim, 0.0);
  EXPECT_EQ(d.original_max_position_embeddings, 2048);  // max_position_embeddings
}

// Spec §0.3, in double: the range, then f_i blended towards f_i / factor.
std::vector<double> yarn_formula(double base, int d, double factor, double l0, double beta_fast,
                                 double beta_slow, double* lo_out, double* hi_out) {
  auto corr = [&](double n) {
    return d * std::log(l0 / (n * 2 * std::numbers::pi)) / (2 * std::log(base));
  };
  const double lo = std::max(std::floor(corr(beta_fast)), 0.0);
  double hi = std::min(std::ceil(corr(beta_slow)), d - 1.0);
  if (lo == hi) hi += 0.001;
  *lo_out = lo;
  *hi_out = hi;
  std::vector<double> f(d / 2);
  for (int i = 0; i < d / 2; ++i) {
    const double fi = std::pow(base, -2.0 * i / d);
    const double ramp = std::clamp((i - lo) / (hi - lo), 0.0, 1.0);
    f[i] = fi * (1 - ramp) + fi / factor * ramp;
  }
  return f;
}

void expect_yarn_matches(const RopeScaling& s, double base, int d, double want_lo, double want_hi) {
  double lo = 0, hi = 0;
  const auto want = yarn_formula(base, d, s.factor, static_cast<double>(s.original_max_position_embeddings),
                                 s.beta_fast, s.beta_slow, &lo, &hi);
  EXPECT_EQ(lo, want_lo);  // the spec's worked values
  EXPECT_EQ(hi, want_hi);
  const YarnRange r = yarn_correction_range(s, base, d);
  EXPECT_EQ(r.lo, lo);
  EXPECT_EQ(r.hi, hi);
  const auto got = rope_inv_freq(s, base, d);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 2e-7 * want[i]) << "pair " << i;
  // The ends of the ramp: dims below lo keep their frequency, above hi are
  // divided by factor (so the test cannot pass with the ramp reversed).
  EXPECT_NEAR(got[0], 1.0, 1e-7);
  EXPECT_NEAR(got.back(), std::pow(base, -2.0 * (d / 2 - 1) / d) / s.factor,
              2e-7 * got.back());
}

TEST(Yarn, TinyConfigInvFreq) {  // spec §6.1: d_r 16, factor 4, L0 1024 -> lo 1, hi 5
  const RopeScaling s =
      load_with({{"type", "yarn"}, {"factor", 4}, {"original_max_position_embeddings", 1024},
                 {"mscale", 1.0}, {"mscale_all_dim", 1.0}}, 2048)
          .rope_scaling;
  expect_yarn_matches(s, 10000.0, 16, 1.0, 5.0);
}

TEST(Yarn, RealConfigInvFreq) {  // d 64, factor 40, L0 4096 -> lo 10, hi 23
  expect_yarn_matches(load_with(kV3Scaling).rope_scaling, 10000.0, 64, 10.0, 23.0);
}

TEST(Yarn, MscaleAndSoftmaxScale) {
  EXPECT_EQ(yarn_get_mscale(1.0, 1.0), 1.0);
  EXPECT_EQ(yarn_get_mscale(0.5, 3.0), 1.0);
  EXPECT_DOUBLE_EQ(yarn_get_mscale(40.0, 1.0), 0.1 * std::log(40.0) + 1.0);
  EXPECT_DOUBLE_EQ(yarn_get_mscale(40.0, 0.707), 0.1 * 0.707 * std::log(40.0) + 1.0);

  // DeepSeek V3: mscale == mscale_all_dim, so cos/sin are unscaled and the
  // softmax scale carries mscale^2: 192^-0.5 * 1.87385 = 0.135234 (spec).
  const RopeScaling v3 = load_with(kV3Scaling).rope_scaling;
  EXPECT_DOUBLE_EQ(rope_attention_factor(v3), 1.0);
  EXPECT_NEAR(yarn_softmax_scale_factor(v3), 1.87385, 1e-5);
  EXPECT_NEAR(std::pow(192.0, -0.5) * yarn_softmax_scale_factor(v3), 0.135234, 1e-6);
  // Tiny (spec §6.1): 48^-0.5 * 1.29648.
  const RopeScaling tiny =
      load_with({{"type", "yarn"}, {"factor", 4}, {"original_max_position_embeddings", 1024},
                 {"mscale", 1.0}, {"mscale_all_dim", 1.0}}, 2048)
          .rope_scaling;
  EXPECT_NEAR(yarn_softmax_scale_factor(tiny), 1.29648, 1e-5);

  // Without mscale_all_dim (HF's fallback): cos/sin carry get_mscale(factor)
  // and the softmax scale is left alone.
  RopeScaling plain = v3;
  plain.mscale_all_dim = 0;
  EXPECT_DOUBLE_EQ(rope_attention_factor(plain), yarn_get_mscale(40.0));
  EXPECT_EQ(yarn_softmax_scale_factor(plain), 1.0);
  // Different mscales: their ratio; an explicit attention_factor wins.
  RopeScaling ratio = v3;
  ratio.mscale = 0.707;
  EXPECT_DOUBLE_EQ(rope_attention_factor(ratio),
                   yarn_get_mscale(40.0, 0.707) / yarn_get_mscale(40.0, 1.0));
  ratio.attention_factor = 1.5;
  EXPECT_EQ(rope_attention_factor(ratio), 1.5);
  // Not YaRN: nothing.
  EXPECT_EQ(rope_attention_factor(RopeScaling{}), 1.0);
  EXPECT_EQ(yarn_softmax_scale_factor(RopeScaling{}), 1.0);
}

TEST(Yarn, LlamaFamilyRefusesIt) {
  TempDir dir;
  for (const auto& entry : fs::directory_iterator(kStories))
    fs::copy_file(entry.path(), dir / entry.path().filename().string());
  auto cfg = nlohmann::json::parse(read_file(dir / "config.json"));
  cfg["rope_scaling"] = {{"type", "yarn"}, {"factor", 4}, {"original_max_position_embeddings", 256}};
  write_file(dir / "config.json", cfg.dump());
  expect_input_error([&] { load_model(dir.str()); },
                     {"rope_scaling type 'yarn' is supported for DeepSeek models only",
                      "LlamaForCausalLM"});
}

}  // namespace
}  // namespace pagoda::test
