// The Llama-family decoder: pre-norm transformer with RMSNorm, RoPE, GQA
// attention and a SwiGLU MLP. Llama, Mistral, Qwen2 (q/k/v bias) and Qwen3
// (per-head q/k RMSNorm) are this model with different switches.
#pragma once

#include <memory>

#include "models/checkpoint.h"
#include "models/model.h"
#include "models/quantize.h"
#include "parallel/communicator.h"

namespace pagoda {

struct LlamaVariant {
  bool qk_norm = false;  // Qwen3: RMSNorm over each q/k head before RoPE
};

std::unique_ptr<CausalLM> make_llama_family(const ModelConfig& config,
                                            std::unique_ptr<Checkpoint> checkpoint,
                                            const LlamaVariant& variant,
                                            parallel::Communicator& comm,
                                            const WeightOptions& options = {});

}  // namespace pagoda
