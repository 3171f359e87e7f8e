// The Llama-family decoder: pre-norm transformer with RMSNorm, RoPE, GQA
// attention and a SwiGLU MLP. Llama, Mistral, Qwen2 (q/k/v bias) and Qwen3
// (per-head q/k RMSNorm) are this model with different switches.
#pragma once

#include <memory>
#include <vector>

#include "models/checkpoint.h"
#include "models/model.h"
#include "models/quantize.h"
#include "parallel/communicator.h"

namespace pagoda {

struct LlamaVariant {
  bool qk_norm = false;  // Qwen3: RMSNorm over each q/k head before RoPE
};

// Per layer a K and a V cache of kv_heads heads (a rank's share under
// tensor parallelism): a page is [kv_heads, block_size, head_dim] rows
// (ops::KVLayout), full attention or the layer's sliding window.
std::vector<LayerKVCache> llama_kv_cache_specs(const ModelConfig& config, int64_t kv_heads,
                                               DType kv_dtype);

std::unique_ptr<CausalLM> make_llama_family(const ModelConfig& config,
                                            std::unique_ptr<Checkpoint> checkpoint,
                                            const LlamaVariant& variant,
                                            parallel::Communicator& comm,
                                            const WeightOptions& options = {});

}  // namespace pagoda
