// The DeepSeek-specific fields of config.json (DeepSeek V3 / V3.2, HF
// names), parsed and checked on top of the common ModelConfig.
#pragma once

#include <cstdint>
#include <string>

#include "models/config.h"

namespace pagoda {

struct DeepseekConfig {
  // MLA (spec §3.1.2). q_lora_rank 0: config's null, q_proj used directly.
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  // MoE (spec §3.1.4).
  int64_t n_routed_experts = 0;  // 0: every layer dense
  int64_t n_shared_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  int64_t n_group = 1;
  int64_t topk_group = 1;
  std::string scoring_func = "softmax";  // "sigmoid" (V3) or "softmax" (V2)
  std::string topk_method = "greedy";    // "noaux_tc" (V3), "group_limited_greedy", "greedy"
  bool norm_topk_prob = false;
  double routed_scaling_factor = 1.0;
  int64_t first_k_dense_replace = 0;
  int64_t moe_layer_freq = 1;
  int64_t num_nextn_predict_layers = 0;  // MTP layers after the stack (loaded, not run)

  int64_t q_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  // Layer l's FFN is a mixture of experts (HF DeepseekV3's rule).
  bool is_moe_layer(int64_t l) const {
    return n_routed_experts > 0 && l >= first_k_dense_replace && l % moe_layer_freq == 0;
  }
};

// Reads DIR/config.json's DeepSeek fields; InputError naming the field for
// a missing or bad one (quantization_config is ModelConfig's).
DeepseekConfig load_deepseek_config(const std::string& dir);

}  // namespace pagoda
