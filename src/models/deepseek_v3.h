// DeepSeek V3 (DeepseekV3ForCausalLM: DeepSeek V3 / V3.1 / R1 and the
// Kimi-K2 class reusing it): multi-head latent attention over a paged
// latent cache, and a mixture of experts with group-limited sigmoid routing,
// from checkpoints as published (FP8 e4m3 weights with 128x128 block
// scales, or bf16/f32). Spec: shared/research/deepseek-attention-spec.md
// §0, §1.1, §2.1, §3.1.1-3.1.2, §3.1.4.
#pragma once

#include <memory>

#include "models/checkpoint.h"
#include "models/model.h"
#include "models/quantize.h"
#include "parallel/communicator.h"

namespace pagoda {

std::unique_ptr<CausalLM> make_deepseek_v3(const ModelConfig& config,
                                           std::unique_ptr<Checkpoint> checkpoint,
                                           parallel::Communicator& comm,
                                           const WeightOptions& options = {});

}  // namespace pagoda
