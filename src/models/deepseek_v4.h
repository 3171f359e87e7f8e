// DeepSeek V4 (DeepseekV4ForCausalLM; spec §1.2-§4.3, seed 000): hybrid
// attention (sliding window everywhere, plus c4a compressed entries picked
// by a lightning indexer or c128a compressed entries read in full), one
// shared K=V entry per token, attention sinks, grouped low-rank output,
// mHC hyper-connections on the residual stream and sqrtsoftplus MoE with
// hash-routed first layers. Every piece of decoder state (window entries,
// compressed entries, indexer keys, the compressors' rolling rows) is a
// typed paged cache (models/deepseek_v4_config.h), so continuous batching,
// chunked prefill, prefix caching and preemption run it unchanged.
#pragma once

#include <memory>

#include "models/checkpoint.h"
#include "models/config.h"
#include "models/model.h"
#include "models/quantize.h"
#include "parallel/communicator.h"

namespace pagoda {

std::unique_ptr<CausalLM> make_deepseek_v4(const ModelConfig& config,
                                           std::unique_ptr<Checkpoint> checkpoint,
                                           parallel::Communicator& comm,
                                           const WeightOptions& options);

}  // namespace pagoda
