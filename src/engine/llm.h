// The offline API: load a model once, generate for a list of prompts.
//
//   LLM llm("models/stories260k");
//   SamplingParams p; p.temperature = 0; p.max_tokens = 64;
//   auto outputs = llm.generate({"Once upon a time"}, p);
//   std::cout << outputs[0].text;
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "engine/llm_engine.h"

namespace pagoda {

// A prompt is text (tokenized with the model's tokenizer, BOS added as its
// config says) or token ids used as they are.
struct Prompt {
  std::string text;
  std::vector<int32_t> token_ids;  // used when non-empty
  static Prompt from_text(std::string t) { return {std::move(t), {}}; }
  static Prompt from_ids(std::vector<int32_t> ids) { return {{}, std::move(ids)}; }
};

class LLM {
 public:
  explicit LLM(const std::string& model_dir, const EngineOptions& options = {});

  // Called after every step with (finished requests, total requests). If it
  // throws, generate() aborts its unfinished requests (their KV blocks are
  // freed) and rethrows: how a caller interrupts a long call.
  using Progress = std::function<void(size_t done, size_t total)>;

  // One output per prompt, in prompt order. `params` holds one entry for all
  // prompts or one per prompt. Throws InputError before running anything if
  // any prompt or parameter is invalid.
  std::vector<RequestOutput> generate(const std::vector<Prompt>& prompts,
                                      const std::vector<SamplingParams>& params,
                                      const Progress& progress = nullptr);
  std::vector<RequestOutput> generate(const std::vector<std::string>& prompts,
                                      const SamplingParams& params);

  std::vector<int32_t> encode(const std::string& text) const;
  LLMEngine& engine() { return engine_; }
  const Tokenizer& tokenizer() const { return engine_.tokenizer(); }

 private:
  LLMEngine engine_;
  uint64_t next_request_id_ = 0;
};

}  // namespace pagoda
