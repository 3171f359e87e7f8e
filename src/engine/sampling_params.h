// Per-request sampling parameters, with vLLM / OpenAI semantics.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace pagoda {

namespace structured {
class CompiledGrammar;
}

// vLLM's RequestOutputKind: what the RequestOutputs of a request carry.
// Cumulative: everything so far at every step (token_ids, text, logprobs,
// prompt_ids: a step's copying grows with the sequence). Delta: what the
// step added only (token_ids = new_token_ids, text = new_text, the new
// tokens' logprobs; prompt_ids on the request's first output only), so a
// step costs the same at any length: for streaming. FinalOnly: no output
// until the request finishes, then one cumulative output.
enum class RequestOutputKind { Cumulative, Delta, FinalOnly };

struct SamplingParams {
  float temperature = 1.0f;             // 0 = greedy
  float top_p = 1.0f;                   // (0, 1]
  int top_k = 0;                        // 0 or -1 = off
  float min_p = 0.0f;                   // [0, 1]
  std::optional<uint64_t> seed;         // same seed -> same output
  float repetition_penalty = 1.0f;      // > 0; applies to prompt + output tokens
  float presence_penalty = 0.0f;        // [-2, 2]; output tokens
  float frequency_penalty = 0.0f;       // [-2, 2]; output tokens
  int max_tokens = 16;                  // >= 1
  int min_tokens = 0;                   // EOS/stop ids suppressed before this many
  std::vector<std::string> stop;        // stop strings (not included in output)
  std::vector<int32_t> stop_token_ids;  // extra stop ids (EOS is implicit)
  bool ignore_eos = false;
  int logprobs = -1;  // -1: none; N >= 0: logprob of the chosen token + top N
  // vLLM's prompt_logprobs. -1: none; N >= 0: for every prompt position
  // after the first, the prompt token's logprob and rank under the raw model
  // distribution, plus the top N (engine/prompt_logprobs.h). Such a request
  // does not read the prefix cache until its prompt is scored, since a cache
  // hit skips the positions whose logits it needs (as vLLM does).
  int prompt_logprobs = -1;
  bool skip_special_tokens = true;
  // OpenAI's logit_bias: (token id, bias in [-100, 100]) added to the logit
  // before sampling (after the raw logprobs are taken, as vLLM reports them).
  std::vector<std::pair<int32_t, float>> logit_bias;
  // vLLM's allowed_token_ids: when non-empty, every other id is masked.
  std::vector<int32_t> allowed_token_ids;
  // vLLM's bad_words, as token sequences (server/bad_words.h tokenizes the
  // words): a sequence's last id is masked whenever the output so far ends
  // with the rest of it, so the whole sequence is never generated.
  std::vector<std::vector<int32_t>> bad_words_token_ids;
  // Scheduling priority, as in vLLM: lower values are admitted first and
  // preempted last. Only with SchedulingPolicy::Priority; 0 otherwise.
  int priority = 0;
  // Structured outputs (constrained decoding): when set, every token must
  // keep the output a prefix of a sentence of this grammar (the sampler
  // masks the others before temperature and the rest, after the raw
  // logprobs), EOS is allowed only once it is complete, and the request
  // finishes when nothing else can follow. Compiled by
  // LLMEngine::grammar_compiler() (structured/grammar_compiler.h).
  std::shared_ptr<const structured::CompiledGrammar> grammar;
  RequestOutputKind output_kind = RequestOutputKind::Cumulative;

  bool greedy() const { return temperature == 0.0f; }
  // The parameters of choice `index` of n samples of one prompt (OpenAI's
  // and vLLM's n): a seeded request gets seed + index, so the choices
  // differ and each is reproducible. The server and the Python package's
  // n both expand requests with this.
  SamplingParams for_choice(int index) const {
    SamplingParams p = *this;
    if (p.seed) p.seed = *p.seed + static_cast<uint64_t>(index);
    return p;
  }
  // Throws InputError naming the bad field and its allowed range.
  void validate() const;
  // As validate(), plus the token ids of logit_bias, allowed_token_ids and
  // bad words against the vocabulary [0, vocab_size).
  void validate_token_ids(int64_t vocab_size) const;
};

}  // namespace pagoda
