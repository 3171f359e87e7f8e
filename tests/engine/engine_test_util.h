// Shared by the engine tests: the demo model and greedy sampling.
#pragma once

#include <string>

#include "engine/sampling_params.h"

namespace pagoda::test {

inline const std::string kDemoModel = PAGODA_MODELS_DIR "/stories260k";

// Greedy decoding of exactly max_tokens tokens (EOS ignored unless asked).
inline SamplingParams greedy(int max_tokens, bool ignore_eos = true) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  p.ignore_eos = ignore_eos;
  return p;
}

}  // namespace pagoda::test
