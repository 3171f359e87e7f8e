#include "models/config.h"

#include <filesystem>

#include "core/error.h"
#include "models/json_fields.h"

namespace pagoda {

namespace {

using nlohmann::json;

// Qwen2Config's default when a config enables the window but omits
// max_window_layers (transformers' Qwen2/Qwen3 configs default it to 28).
constexpr int64_t kQwenDefaultMaxWindowLayers = 28;

std::string architecture_of(const JsonFields& f) {
  if (!f.has("architectures")) f.missing("architectures");
  const json& a = f.at("architectures");
  if (!a.is_array() || a.empty()) f.fail("architectures", "a non-empty list of strings");
  for (const json& name : a) {
    if (!name.is_string()) f.fail("architectures", "a non-empty list of strings");
  }
  return a[0].get<std::string>();
}

// rope_theta and the RoPE variant. Older configs hold the variant in
// `rope_scaling` (variant key "rope_type" or the legacy "type") and the base
// in `rope_theta`; transformers v5 writes both into `rope_parameters`.
void parse_rope(const JsonFields& f, ModelConfig& c) {
  f.number("rope_theta", c.rope_theta, /*positive=*/true);
  const bool v5 = f.has("rope_parameters");
  const char* key = v5 ? "rope_parameters" : "rope_scaling";
  if (!f.has(key)) return;
  if (!f.at(key).is_object()) f.fail(key, "an object or null");
  const JsonFields r(f.at(key), f.file(), std::string(key) + ".");
  RopeScaling& s = c.rope_scaling;
  const char* type_key = r.has("rope_type") ? "rope_type" : "type";
  // A v5 rope_parameters without a type is a per-layer-type map (Gemma 3
  // style) that we must not mistake for plain RoPE.
  if (v5 && !r.has(type_key)) r.missing("rope_type");
  r.string(type_key, s.type);
  if (v5) r.number("rope_theta", c.rope_theta, /*positive=*/true);
  if (s.type == "default") return;
  if (s.type != "linear" && s.type != "llama3" && !s.is_yarn()) {
    throw_input_error(
        "{}: {}.{} '{}' is not supported (supported: default, linear, llama3, yarn, "
        "deepseek_yarn)",
        f.file(), key, type_key, s.type);
  }
  // Like transformers' rope validation: the scaling parameters are required.
  if (!r.has("factor")) r.missing("factor");
  r.number("factor", s.factor, /*positive=*/true);
  if (s.is_yarn()) {
    // transformers' defaults: beta 32 / 1, mscale 1, no mscale_all_dim, the
    // original context = max_position_embeddings when not given.
    r.number("beta_fast", s.beta_fast, /*positive=*/true);
    r.number("beta_slow", s.beta_slow, /*positive=*/true);
    r.number("mscale", s.mscale);
    r.number("mscale_all_dim", s.mscale_all_dim);
    r.number("attention_factor", s.attention_factor, /*positive=*/true);
    s.original_max_position_embeddings = c.max_position_embeddings;
    r.positive_int("original_max_position_embeddings", s.original_max_position_embeddings);
    if (s.original_max_position_embeddings <= 0) r.missing("original_max_position_embeddings");
    if (!(s.beta_fast > s.beta_slow)) {
      throw_input_error("{}: {}.beta_fast ({}) must exceed beta_slow ({})", f.file(), key,
                        s.beta_fast, s.beta_slow);
    }
    return;
  }
  if (s.type == "llama3") {
    for (const char* k : {"low_freq_factor", "high_freq_factor"}) {
      if (!r.has(k)) r.missing(k);
    }
    r.number("low_freq_factor", s.low_freq_factor, /*positive=*/true);
    r.number("high_freq_factor", s.high_freq_factor, /*positive=*/true);
    s.original_max_position_embeddings =
        r.required_positive_int("original_max_position_embeddings");
    // The llama3 ramp divides by (high - low).
    if (!(s.high_freq_factor > s.low_freq_factor)) {
      throw_input_error("{}: {}.high_freq_factor ({}) must exceed low_freq_factor ({})", f.file(),
                        key, s.high_freq_factor, s.low_freq_factor);
    }
  }
}

// quantization_config: refuses every format the loader cannot read, so a
// GPTQ/AWQ/per-tensor-FP8 checkpoint stops here with its name instead of on
// a missing tensor later.
void parse_quantization(const JsonFields& f, ModelConfig& c) {
  constexpr const char* kKey = "quantization_config";
  if (!f.has(kKey)) return;
  if (!f.at(kKey).is_object()) f.fail(kKey, "an object or null");
  const JsonFields q(f.at(kKey), f.file(), std::string(kKey) + ".");
  CheckpointQuantization& out = c.quantization;
  if (!q.has("quant_method")) q.missing("quant_method");
  q.string("quant_method", out.method);
  if (out.method != "fp8") {
    throw_input_error(
        "{}: {}.quant_method '{}' is not supported (supported: fp8, the block-scaled e4m3 "
        "weights DeepSeek publishes)",
        f.file(), kKey, out.method);
  }
  out.fmt = "e4m3";
  q.string("fmt", out.fmt);
  if (out.fmt != "e4m3") {
    throw_input_error("{}: {}.fmt '{}' is not supported (supported: e4m3)", f.file(), kKey,
                      out.fmt);
  }
  out.activation_scheme = "dynamic";
  q.string("activation_scheme", out.activation_scheme);
  if (out.activation_scheme != "dynamic") {
    throw_input_error(
        "{}: {}.activation_scheme '{}' is not supported (supported: dynamic; activations stay "
        "f32)",
        f.file(), kKey, out.activation_scheme);
  }
  // DeepSeek V4 names its E8M0 block scales' format; the scale tensor's
  // dtype (F32 or F8_E8M0) is what the loader reads, so only that one
  // format is accepted here.
  std::string scale_fmt = "ue8m0";
  q.string("scale_fmt", scale_fmt);
  if (scale_fmt != "ue8m0") {
    throw_input_error("{}: {}.scale_fmt '{}' is not supported (supported: ue8m0)", f.file(), kKey,
                      scale_fmt);
  }
  if (!q.has("weight_block_size")) q.missing("weight_block_size");
  const nlohmann::json& b = q.at("weight_block_size");
  if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() || !b[1].is_number_integer())
    q.fail("weight_block_size", "a list of two integers");
  out.weight_block_size = {b[0].get<int64_t>(), b[1].get<int64_t>()};
  if (out.weight_block_size != std::vector<int64_t>{128, 128}) {
    throw_input_error(
        "{}: {}.weight_block_size [{}, {}] is not supported (the FP8 kernels use 128 x 128 "
        "blocks)",
        f.file(), kKey, out.weight_block_size[0], out.weight_block_size[1]);
  }
}

// Per-layer sliding windows, in transformers' order of precedence:
//  1. `layer_types` (newer configs): "sliding_attention" layers get
//     `sliding_window`, "full_attention" layers none.
//  2. Qwen style (a `use_sliding_window` key, or a qwen* model_type): the
//     window applies only if use_sliding_window is true, and then to layers
//     with index >= max_window_layers (HF Qwen2Config builds layer_types as
//     "sliding" iff i >= max_window_layers). Qwen configs often carry a
//     `sliding_window` value with use_sliding_window false: no window.
//  3. Mistral style: a `sliding_window` integer applies to every layer.
void parse_sliding_window(const JsonFields& f, ModelConfig& c) {
  c.layer_sliding_window.assign(static_cast<size_t>(c.num_hidden_layers), 0);
  int64_t window = 0;
  f.positive_int("sliding_window", window);

  if (f.has("layer_types")) {
    const json& types = f.at("layer_types");
    const std::string what = "a list of " + std::to_string(c.num_hidden_layers) +
                             " \"full_attention\" / \"sliding_attention\" strings";
    if (!types.is_array() || static_cast<int64_t>(types.size()) != c.num_hidden_layers) {
      f.fail("layer_types", what);
    }
    for (size_t i = 0; i < types.size(); ++i) {
      const std::string type = types[i].is_string() ? types[i].get<std::string>() : "";
      if (type == "sliding_attention") {
        if (window == 0) {
          throw_input_error(
              "{}: layer_types[{}] is \"sliding_attention\" but field 'sliding_window' is not set",
              f.file(), i);
        }
        c.layer_sliding_window[i] = window;
      } else if (type != "full_attention") {
        throw_input_error(
            "{}: layer_types[{}] is {}; supported: \"full_attention\", \"sliding_attention\"",
            f.file(), i, describe_json(types[i]));
      }
    }
    return;
  }

  const bool qwen_style = f.has("use_sliding_window") || c.model_type.rfind("qwen", 0) == 0;
  if (qwen_style) {
    bool use = false;
    f.boolean("use_sliding_window", use);
    if (!use) return;
    if (window == 0) {
      throw_input_error("{}: use_sliding_window is true but field 'sliding_window' is not set",
                        f.file());
    }
    int64_t first = kQwenDefaultMaxWindowLayers;
    f.non_negative_int("max_window_layers", first);
    for (int64_t i = first; i < c.num_hidden_layers; ++i) c.layer_sliding_window[i] = window;
    return;
  }
  for (int64_t& w : c.layer_sliding_window) w = window;
}

}  // namespace

ModelConfig load_model_config(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "config.json").string();
  const json j = read_json_file(path);
  if (!j.is_object())
    throw_input_error("{}: expected a JSON object, got {}", path, describe_json(j));
  const JsonFields f(j, path);
  ModelConfig c;

  c.architecture = architecture_of(f);
  f.string("model_type", c.model_type);
  c.hidden_size = f.required_positive_int("hidden_size");
  // DeepSeek V4 has no dense MLP (every layer is MoE), so no intermediate_size.
  if (c.architecture == "DeepseekV4ForCausalLM") {
    f.positive_int("intermediate_size", c.intermediate_size);
  } else {
    c.intermediate_size = f.required_positive_int("intermediate_size");
  }
  c.num_hidden_layers = f.required_positive_int("num_hidden_layers");
  c.num_attention_heads = f.required_positive_int("num_attention_heads");
  c.vocab_size = f.required_positive_int("vocab_size");

  c.num_key_value_heads = c.num_attention_heads;
  f.positive_int("num_key_value_heads", c.num_key_value_heads);
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    throw_input_error("{}: num_attention_heads {} is not a multiple of num_key_value_heads {}",
                      path, c.num_attention_heads, c.num_key_value_heads);
  }
  if (f.has("head_dim")) {
    f.positive_int("head_dim", c.head_dim);  // may differ from hidden/heads (Qwen3)
  } else if (c.hidden_size % c.num_attention_heads != 0) {
    throw_input_error(
        "{}: hidden_size {} is not divisible by num_attention_heads {} and no head_dim is given",
        path, c.hidden_size, c.num_attention_heads);
  } else {
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }

  f.positive_int("max_position_embeddings", c.max_position_embeddings);
  f.number("rms_norm_eps", c.rms_norm_eps, /*positive=*/true);
  parse_rope(f, c);
  f.boolean("tie_word_embeddings", c.tie_word_embeddings);
  f.boolean("attention_bias", c.attention_bias);
  // Qwen2's q/k/v projections always carry biases; its config has no flag.
  if (c.model_type == "qwen2") c.attention_bias = true;
  f.boolean("mlp_bias", c.mlp_bias);
  // The Llama-family model code loads no MLP biases; a checkpoint that has
  // them would otherwise load "fine" and compute wrong logits.
  if (c.mlp_bias) throw_input_error("{}: mlp_bias true is not supported", path);
  f.string("hidden_act", c.hidden_act);
  f.string("torch_dtype", c.torch_dtype);
  if (c.torch_dtype.empty()) f.string("dtype", c.torch_dtype);  // transformers v5 name
  f.token_id("bos_token_id", c.bos_token_id);
  f.token_ids("eos_token_id", c.eos_token_ids);
  parse_sliding_window(f, c);
  parse_quantization(f, c);

  // generation_config.json is what HF generate() uses; its ids win.
  const std::filesystem::path gen_path = std::filesystem::path(dir) / "generation_config.json";
  std::error_code ec;
  if (std::filesystem::exists(gen_path, ec)) {
    const json g = read_json_file(gen_path.string());
    if (!g.is_object()) {
      throw_input_error("{}: expected a JSON object, got {}", gen_path.string(), describe_json(g));
    }
    const JsonFields gf(g, gen_path.string());
    gf.token_id("bos_token_id", c.bos_token_id);
    gf.token_ids("eos_token_id", c.eos_token_ids);
  }
  return c;
}

}  // namespace pagoda
