// The DeepSeek V4 fields of config.json (HF names, spec §1.2), parsed and
// checked on top of the common ModelConfig, and the KV caches a V4 model
// keeps per layer (spec §4.3, §5.1, §5.4): the caches are the same on every
// tensor-parallel rank (one shared K=V entry per token, like MLA's latent).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kv/kv_cache_spec.h"
#include "models/config.h"

namespace pagoda {

struct DeepseekV4Config {
  // Attention (spec §3.2.2): q LoRA, one shared K=V entry of head_dim
  // values per token whose last qk_rope_head_dim are rotary, a grouped
  // low-rank output projection.
  int64_t q_lora_rank = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t o_groups = 0;
  int64_t o_lora_rank = 0;
  int64_t sliding_window = 0;  // W: raw-token window including the current token
  // Per layer, then the MTP layers: 0 = sliding window only, 4 = c4a
  // (overlapping compression + indexer top-k), any other r = non-overlapping
  // compression r:1 attended in full (c128a in the real model).
  std::vector<int64_t> compress_ratios;
  double compress_rope_theta = 40000.0;
  // The V4 lightning indexer over c4 entries (spec §3.2.4).
  int64_t index_n_heads = 0;
  int64_t index_head_dim = 0;
  int64_t index_topk = 0;
  // mHC (spec §3.2.1).
  int64_t hc_mult = 1;
  int64_t hc_sinkhorn_iters = 1;
  double hc_eps = 1e-6;
  // MoE (spec §3.2.6): every layer; the first num_hash_layers route by tid2eid.
  int64_t n_routed_experts = 0;
  int64_t n_shared_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  int64_t num_hash_layers = 0;
  std::string scoring_func = "sqrtsoftplus";
  bool norm_topk_prob = true;
  double routed_scaling_factor = 1.0;
  double swiglu_limit = 0.0;  // 0: no clamp
  int64_t num_nextn_predict_layers = 0;

  int64_t compress_ratio(int64_t layer) const { return compress_ratios[layer]; }
  // c4a layers compress with overlapping windows and run the indexer.
  static bool overlaps(int64_t ratio) { return ratio == 4; }
};

// Reads DIR/config.json's V4 fields; InputError naming the field for a
// missing or bad one. compress_ratios must have num_hidden_layers (+ MTP)
// entries, each 0 or dividing 256-position blocks.
DeepseekV4Config load_deepseek_v4_config(const std::string& dir, const ModelConfig& config);

// Bytes of one main (window or compressed) entry in a cache of kv_dtype:
// head_dim values (F32/BF16), or FlashMLA's V4 fp8 entry for F8E4M3 (nope
// e4m3 bytes + rope bf16 + one UE8M0 scale per 64 nope values, a partial
// last group included, padded to 8).
int64_t deepseek_v4_entry_bytes(int64_t head_dim, int64_t rope_dim, DType kv_dtype);
// Bytes of one indexer key of head_dim values in a cache of indexer_dtype:
// F32/BF16, F8E4M3 (+ f32 scale, 132 B for 128), or F4E2M1 (MXFP4: e2m1
// pairs + one UE8M0 scale per 32 values, 68 B for 128).
int64_t deepseek_v4_indexer_entry_bytes(int64_t head_dim, DType indexer_dtype);

// Per layer, in this order: "swa" (window of W raw entries, 64 positions a
// page), and for a compressed layer "compressed" (one entry per r
// positions, all kept), "compressor_state" (the rolling (value, logit) rows
// of the last c*r positions, f32); for a c4a layer also "indexer_k" and
// "indexer_state". Pages are 576-byte aligned (FlashMLA); a state cache's
// page holds as many positions (a power of two, at most its window) as fit
// in the page of the cache it feeds (the window page for the main state,
// the indexer key page for the indexer's), so they share a page-size bucket.
// The MTP block's window cache is not here: CausalLM::mtp_kv_cache_specs
// adds it when the `mtp` proposer runs the block.
std::vector<LayerKVCache> deepseek_v4_kv_cache_specs(const ModelConfig& config,
                                                     const DeepseekV4Config& v4, DType kv_dtype,
                                                     DType indexer_dtype);

}  // namespace pagoda
