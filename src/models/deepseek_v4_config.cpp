#include "models/deepseek_v4_config.h"

#include <filesystem>

#include <fmt/format.h>

#include "core/error.h"
#include "models/json_fields.h"
#include "ops/ops.h"

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
  // The layout the attention kernels read (ops::V4EntryLayout): fp8 is
  // FlashMLA's V4 entry, nope e4m3 + rope bf16 + one UE8M0 scale per 64
  // nope values padded to 8 bytes (448 + 128 + 7 + 1 = 584).
  ops::V4EntryLayout layout;
  layout.head_dim = static_cast<int>(head_dim);
  layout.rope_dim = static_cast<int>(rope_dim);
  layout.dtype = kv_dtype;
  return layout.entry_bytes();
}

int64_t deepseek_v4_indexer_entry_bytes(int64_t head_dim, DType indexer_dtype) {
  // The layout indexer_topk reads (ops::IndexerLayout), per key.
  ops::IndexerLayout layout;
  layout.block_size = 1;
  layout.head_dim = static_cast<int>(head_dim);
  layout.dtype = indexer_dtype;
  return layout.page_bytes();
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
                                                     DType indexer_dtype) {
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
    index_k.entry_bytes = deepseek_v4_indexer_entry_bytes(v4.index_head_dim, indexer_dtype);
    index_k.compress_ratio = 4;
    index_k.page_alignment = kPageAlignment;
    index_k.format = fmt::format("indexer k {} {}", v4.index_head_dim,
                                 indexer_dtype == DType::F4E2M1   ? std::string("mxfp4")
                                 : indexer_dtype == DType::F8E4M3 ? std::string("fp8")
                                                                  : std::string(dtype_name(indexer_dtype)));
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
