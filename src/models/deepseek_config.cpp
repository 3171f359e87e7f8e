#include "models/deepseek_config.h"

#include <filesystem>

#include "core/error.h"
#include "models/json_fields.h"

namespace pagoda {

DeepseekConfig load_deepseek_config(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "config.json").string();
  const nlohmann::json j = read_json_file(path);
  const JsonFields f(j, path);
  DeepseekConfig c;
  f.non_negative_int("q_lora_rank", c.q_lora_rank);  // null: no q LoRA
  c.kv_lora_rank = f.required_positive_int("kv_lora_rank");
  c.qk_nope_head_dim = f.required_positive_int("qk_nope_head_dim");
  c.qk_rope_head_dim = f.required_positive_int("qk_rope_head_dim");
  c.v_head_dim = f.required_positive_int("v_head_dim");
  if (c.qk_rope_head_dim % 2 != 0) f.fail("qk_rope_head_dim", "even (rotated in pairs)");

  f.non_negative_int("n_routed_experts", c.n_routed_experts);
  if (c.n_routed_experts > 0) {
    c.num_experts_per_tok = f.required_positive_int("num_experts_per_tok");
    c.moe_intermediate_size = f.required_positive_int("moe_intermediate_size");
    f.non_negative_int("n_shared_experts", c.n_shared_experts);
    f.positive_int("n_group", c.n_group);
    f.positive_int("topk_group", c.topk_group);
    f.string("scoring_func", c.scoring_func);
    f.string("topk_method", c.topk_method);
    f.boolean("norm_topk_prob", c.norm_topk_prob);
    f.number("routed_scaling_factor", c.routed_scaling_factor, /*positive=*/true);
    f.non_negative_int("first_k_dense_replace", c.first_k_dense_replace);
    f.positive_int("moe_layer_freq", c.moe_layer_freq);
    if (c.scoring_func != "sigmoid" && c.scoring_func != "softmax") {
      f.fail("scoring_func", "\"sigmoid\" or \"softmax\"");
    }
    if (c.topk_method != "noaux_tc" && c.topk_method != "group_limited_greedy" &&
        c.topk_method != "greedy") {
      f.fail("topk_method", "\"noaux_tc\", \"group_limited_greedy\" or \"greedy\"");
    }
    if (c.n_routed_experts % c.n_group != 0) {
      throw_input_error("{}: n_routed_experts {} is not divisible by n_group {}", path,
                        c.n_routed_experts, c.n_group);
    }
    if (c.topk_group > c.n_group) f.fail("topk_group", "at most n_group");
    if (c.num_experts_per_tok > c.n_routed_experts) {
      f.fail("num_experts_per_tok", "at most n_routed_experts");
    }
    // Selection needs that many experts among the kept groups.
    if (c.num_experts_per_tok > c.topk_group * (c.n_routed_experts / c.n_group)) {
      f.fail("num_experts_per_tok", "at most topk_group * experts per group");
    }
  }
  f.non_negative_int("num_nextn_predict_layers", c.num_nextn_predict_layers);

  return c;
}

}  // namespace pagoda
