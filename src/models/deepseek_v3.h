// DeepSeek V3 (DeepseekV3ForCausalLM: DeepSeek V3 / V3.1 / R1 and the
// Kimi-K2 class reusing it): multi-head latent attention over a paged
// latent cache, and a mixture of experts with group-limited sigmoid routing,
// from checkpoints as published (FP8 e4m3 weights with 128x128 block
// scales, or bf16/f32). Spec: shared/research/deepseek-attention-spec.md
// §0, §1.1, §2.1, §3.1.1-3.1.2, §3.1.4.
#pragma once

#include <memory>

#include <vector>

#include "models/checkpoint.h"
#include "models/deepseek_config.h"
#include "models/model.h"
#include "models/quantize.h"
#include "parallel/communicator.h"

namespace pagoda {

// Per layer one latent cache (kv_lora_rank + qk_rope_head_dim values: f32,
// bf16, or F8E4M3 in the "fp8_ds_mla" layout of 656 bytes for the real
// model: e4m3 latents, one f32 scale per 128 of them, bf16 rope values),
// and for V3.2 the lightning indexer's key cache (index_head_dim values; fp8:
// e4m3 values + one f32 scale, 132 bytes). The same on every rank.
std::vector<LayerKVCache> deepseek_kv_cache_specs(const ModelConfig& config,
                                                  const DeepseekConfig& ds, DType kv_dtype);

std::unique_ptr<CausalLM> make_deepseek_v3(const ModelConfig& config,
                                           std::unique_ptr<Checkpoint> checkpoint,
                                           parallel::Communicator& comm,
                                           const WeightOptions& options = {});

}  // namespace pagoda
