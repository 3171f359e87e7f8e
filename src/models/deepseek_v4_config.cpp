#include "models/deepseek_v4_config.h"

#include <filesystem>

#include <fmt/format.h>

#include "core/error.h"
#include "models/json_fields.h"

namespace pagoda {

DeepseekV4Config load_deepseek_v4_config(const std::string& dir, const ModelConfig& config) {
  const std::string path = (std::filesystem::path(dir) / "config.json").string();
  const nlohmann::json j = read_json_file(path);
  const JsonFields f(j, path);
  DeepseekV4Config c;
  c.q_lora_rank = f.required_positive_int("q_lora_rank");
  c.qk_rope_head_dim = f.required_positive_int("qk_rope_head_dim");
  c.o_groups = f.required_positive_int("o_groups");
  c.o_lora_rank = f.required_positive_int("o_lora_rank");
  c.sliding_window = f.required_positive_int("sliding_window");
  if (c.qk_rope_head_dim % 2 != 0 || c.qk_rope_head_dim > config.head_dim) {
    f.fail("qk_rope_head_dim", "even and at most head_dim");
  }
  if (config.num_attention_heads % c.o_groups != 0) {
    f.fail("o_groups", "a divisor of num_attention_heads");
  }
  if (config.num_key_value_heads != 1) {
    throw_input_error("{}: DeepSeek V4 has one shared K=V head, num_key_value_heads is {}", path,
                      config.num_key_value_heads);
  }
  f.non_negative_int("num_nextn_predict_layers", c.num_nextn_predict_layers);
  if (!f.has("compress_ratios")) f.missing("compress_ratios");
  const nlohmann::json& ratios = f.at("compress_ratios");
  const auto want = static_cast<size_t>(config.num_hidden_layers + c.num_nextn_predict_layers);
  if (!ratios.is_array() || ratios.size() != want) {
    f.fail("compress_ratios", fmt::format("a list of num_hidden_layers + num_nextn_predict_layers "
                                          "= {} integers",
                                          want)
                                  .c_str());
  }
  bool any_c4 = false;
  for (const nlohmann::json& r : ratios) {
    // 0 (window only) or a ratio that divides the 256-position block.
    if (!r.is_number_integer() || r.get<int64_t>() < 0 || r.get<int64_t>() > 256 ||
        (r.get<int64_t>() > 0 && 256 % r.get<int64_t>() != 0)) {
      f.fail("compress_ratios", "a list of 0 or divisors of 256");
    }
    c.compress_ratios.push_back(r.get<int64_t>());
    any_c4 |= c.compress_ratios.back() == 4;
  }
  f.number("compress_rope_theta", c.compress_rope_theta, /*positive=*/true);
  if (any_c4) {
    c.index_n_heads = f.required_positive_int("index_n_heads");
    c.index_head_dim = f.required_positive_int("index_head_dim");
    c.index_topk = f.required_positive_int("index_topk");
    if ((c.index_head_dim & (c.index_head_dim - 1)) != 0 ||
        c.index_head_dim < c.qk_rope_head_dim) {
      f.fail("index_head_dim", "a power of two (Hadamard rotation), at least qk_rope_head_dim");
    }
  }
  f.positive_int("hc_mult", c.hc_mult);
  f.positive_int("hc_sinkhorn_iters", c.hc_sinkhorn_iters);
  f.number("hc_eps", c.hc_eps, /*positive=*/true);
  c.n_routed_experts = f.required_positive_int("n_routed_experts");
  c.num_experts_per_tok = f.required_positive_int("num_experts_per_tok");
  c.moe_intermediate_size = f.required_positive_int("moe_intermediate_size");
  f.non_negative_int("n_shared_experts", c.n_shared_experts);
  f.non_negative_int("num_hash_layers", c.num_hash_layers);
  f.string("scoring_func", c.scoring_func);
  f.boolean("norm_topk_prob", c.norm_topk_prob);
  f.number("routed_scaling_factor", c.routed_scaling_factor, /*positive=*/true);
  f.number("swiglu_limit", c.swiglu_limit);
  if (c.scoring_func != "sqrtsoftplus") f.fail("scoring_func", "\"sqrtsoftplus\" (DeepSeek V4)");
  if (c.num_experts_per_tok > c.n_routed_experts) {
    f.fail("num_experts_per_tok", "at most n_routed_experts");
  }
  if (c.swiglu_limit < 0) f.fail("swiglu_limit", "non-negative");
  return c;
}

int64_t deepseek_v4_entry_bytes(int64_t head_dim, int64_t rope_dim, DType kv_dtype) {
  if (kv_dtype == DType::F8E4M3) {
    const int64_t nope = head_dim - rope_dim;
    if (nope % 64 != 0) {
      throw_input_error("--kv-cache-dtype fp8 needs head_dim - qk_rope_head_dim a multiple of 64 "
                        "(one scale per 64 values), got {}",
                        nope);
    }
    // FlashMLA's V4 entry: nope e4m3 + rope bf16 + nope/64 UE8M0 scales,
    // the scale trailer padded to 8 bytes (448 + 128 + 7 + 1 = 584).
    return nope + 2 * rope_dim + (nope / 64 + 7) / 8 * 8;
  }
  return head_dim * static_cast<int64_t>(dtype_size(kv_dtype));
}

int64_t deepseek_v4_indexer_entry_bytes(int64_t head_dim, DType kv_dtype, bool fp4) {
  if (fp4) {
    if (head_dim % 32 != 0) {
      throw_input_error("--indexer-cache-dtype fp4 needs index_head_dim a multiple of 32, got {}",
                        head_dim);
    }
    return head_dim / 2 + head_dim / 32;  // e2m1 pairs + UE8M0 per 32 (68 for 128)
  }
  if (kv_dtype == DType::F8E4M3) return head_dim + 4;  // e4m3 + f32 scale (132 for 128)
  return head_dim * static_cast<int64_t>(dtype_size(kv_dtype));
}

namespace {

constexpr int64_t kPageAlignment = 576;  // FlashMLA's page alignment (spec §5.4)
constexpr int32_t kWindowPagePositions = 64;
constexpr int32_t kBlockPositions = 256;  // one logical block of a compressed cache

// The rolling compressor state: one f32 row (value half, logit half) of
// c*d values each per position, for the last c*r positions; its page holds
// the largest power-of-two count of positions that fits in `target` bytes
// (the page it shares a bucket with), at most the window.
KVCacheSpec state_spec(int64_t ratio, int64_t dim, int64_t target) {
  const int64_t c = DeepseekV4Config::overlaps(ratio) ? 2 : 1;
  KVCacheSpec s;
  s.sliding_window = c * ratio;
  s.entry_bytes = 2 * c * dim * 4;
  s.page_alignment = kPageAlignment;
  int32_t positions = 1;
  while (positions * 2 <= s.sliding_window && positions * 2 * s.entry_bytes <= target) {
    positions *= 2;
  }
  s.block_size = positions;
  s.format = fmt::format("compressor state r{} {}x(value+logit) f32", ratio, c * dim);
  return s;
}

}  // namespace

std::vector<LayerKVCache> deepseek_v4_kv_cache_specs(const ModelConfig& config,
                                                     const DeepseekV4Config& v4, DType kv_dtype,
                                                     bool indexer_fp4) {
  const int64_t d = config.head_dim, rope = v4.qk_rope_head_dim;
  const std::string fmt_name =
      kv_dtype == DType::F8E4M3
          ? fmt::format("fp8_ds_mla v4 {}+{}", d - rope, rope)
          : fmt::format("v4 kv {} {}", d, dtype_name(kv_dtype));
  KVCacheSpec entry;
  entry.entry_bytes = deepseek_v4_entry_bytes(d, rope, kv_dtype);
  entry.page_alignment = kPageAlignment;
  entry.format = fmt_name;

  KVCacheSpec window = entry;
  window.sliding_window = v4.sliding_window;
  window.block_size = kWindowPagePositions;
  const int64_t window_page = kWindowPagePositions * window.entry_bytes;

  KVCacheSpec index_k;
  if (v4.index_head_dim > 0) {
    index_k.entry_bytes = deepseek_v4_indexer_entry_bytes(v4.index_head_dim, kv_dtype, indexer_fp4);
    index_k.compress_ratio = 4;
    index_k.page_alignment = kPageAlignment;
    index_k.format = indexer_fp4 ? fmt::format("indexer k {} mxfp4", v4.index_head_dim)
                                 : fmt::format("indexer k {} {}", v4.index_head_dim,
                                               kv_dtype == DType::F8E4M3
                                                   ? std::string("fp8")
                                                   : std::string(dtype_name(kv_dtype)));
  }
  const int64_t index_page = (kBlockPositions / 4) * index_k.entry_bytes;

  std::vector<LayerKVCache> caches;
  for (int32_t l = 0; l < static_cast<int32_t>(config.num_hidden_layers); ++l) {
    const int64_t r = v4.compress_ratio(l);
    caches.push_back({l, "swa", window});
    if (r == 0) continue;
    KVCacheSpec compressed = entry;
    compressed.compress_ratio = static_cast<int32_t>(r);
    caches.push_back({l, "compressed", compressed});
    caches.push_back({l, "compressor_state", state_spec(r, d, window_page)});
    if (DeepseekV4Config::overlaps(r)) {
      caches.push_back({l, "indexer_k", index_k});
      caches.push_back({l, "indexer_state", state_spec(4, v4.index_head_dim, index_page)});
    }
  }
  return caches;
}

}  // namespace pagoda
