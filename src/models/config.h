// A model's Hugging Face config.json (+ generation_config.json), parsed and
// checked into plain fields.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pagoda {

struct RopeScaling {
  // "default" | "linear" | "llama3" | "yarn" | "deepseek_yarn" (the latter
  // two are the same YaRN; DeepSeek's configs name it either way).
  std::string type = "default";
  double factor = 1.0;
  double low_freq_factor = 1.0;                  // llama3
  double high_freq_factor = 4.0;                 // llama3
  int64_t original_max_position_embeddings = 0;  // llama3, yarn (default: max_position_embeddings)
  double beta_fast = 32.0;                       // yarn: correction range, in rotations
  double beta_slow = 1.0;
  double mscale = 1.0;          // yarn: cos/sin magnitude, see models/rope.h
  double mscale_all_dim = 0.0;  // yarn: 0 = unset
  double attention_factor = 0.0;  // yarn: explicit cos/sin factor (0 = derive from mscale)

  bool is_yarn() const { return type == "yarn" || type == "deepseek_yarn"; }
};

// config.json's quantization_config: how the checkpoint's own weights are
// stored. Only DeepSeek's FP8 format is accepted: quant_method "fp8", fmt
// "e4m3", dynamic activations, 128 x 128 weight blocks (F8_E4M3 weights
// with per-block scales, loaded by WeightStore::matrix).
struct CheckpointQuantization {
  std::string method;  // "" (none) or "fp8"
  std::string fmt;
  std::string activation_scheme;
  std::vector<int64_t> weight_block_size;
};

struct ModelConfig {
  std::string architecture;  // architectures[0], e.g. "LlamaForCausalLM"
  std::string model_type;    // e.g. "llama", "qwen2", "qwen3"
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // defaults to num_attention_heads
  int64_t head_dim = 0;             // defaults to hidden_size / num_attention_heads
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v projections have biases (Qwen2: always)
  bool mlp_bias = false;
  std::string hidden_act = "silu";
  std::string torch_dtype;  // informational
  CheckpointQuantization quantization;
  // Sliding-window attention: per-layer window in tokens, 0 = full attention.
  // Filled from `layer_types` or Qwen2-style sliding_window/max_window_layers.
  std::vector<int64_t> layer_sliding_window;

  // Generation defaults (generation_config.json wins over config.json).
  std::optional<int32_t> bos_token_id;
  std::vector<int32_t> eos_token_ids;  // may be several
};

// Reads DIR/config.json and, if present, DIR/generation_config.json.
// Throws InputError naming the file, the field and the problem (missing
// required field, wrong JSON type, non-positive size, heads not dividing...).
ModelConfig load_model_config(const std::string& dir);

}  // namespace pagoda
