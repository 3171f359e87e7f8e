// One generation request as the engine tracks it, from arrival to finish.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "engine/spec_decode/adaptive_speculation.h"
#include "engine/spec_decode/ngram_index.h"
#include "engine/sampling_params.h"
#include "engine/stop_checker.h"
#include "kv/kv_cache_manager.h"
#include "structured/grammar_matcher.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {

using Clock = std::chrono::steady_clock;

enum class RequestStatus { Waiting, Running, Finished };

enum class FinishReason { None, Stop, Length, Abort };
const char* finish_reason_name(FinishReason reason);  // "stop", "length", "abort", ""

struct Request {
  Request(std::string id, std::vector<int32_t> prompt, SamplingParams sampling,
          const Tokenizer* tokenizer);

  std::string request_id;
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> output_ids;
  SamplingParams params;
  SequenceRng rng;
  // Where the output stands in params.grammar (null when unconstrained).
  std::unique_ptr<structured::GrammarMatcher> grammar;

  RequestStatus status = RequestStatus::Waiting;
  FinishReason finish_reason = FinishReason::None;

  // KV cache state: the blocks holding this request's tokens (per layer
  // group), and how many of its tokens (prompt + output) have K/V in them.
  KVRequestState kv;
  int64_t num_computed_tokens = 0;
  int64_t num_cached_tokens = 0;  // prompt tokens found in the prefix cache (first admission)
  int64_t num_preemptions = 0;
  bool admitted_before = false;

  // Speculative decoding: draft tokens proposed after the last step, to
  // follow the request's tokens in its next step (position num_tokens() on;
  // they are never part of prompt_ids/output_ids until accepted), and the
  // switch that stops drafting where it does not pay.
  std::vector<int32_t> spec_token_ids;
  AdaptiveSpeculation spec_adaptive;
  // A proposer with caches of its own (spec_decode/proposer.h: a draft
  // model): positions [0, n) of token_at() (the tokens, then the drafts)
  // whose K/V those caches hold. After a step, what the target did not
  // accept is no longer counted (Scheduler), and the prefix cache registers
  // only blocks both computed.
  int64_t num_proposer_computed_tokens = 0;
  // The MTP proposer's deferred positions (spec_decode/mtp_proposer.h): the
  // target's hidden states of positions num_proposer_computed_tokens on,
  // [positions, mtp_hidden_size], which the layer has yet to take (emptied,
  // and its memory freed, when it does and when the request is preempted).
  std::vector<float> mtp_deferred_hidden;
  NgramIndex ngram_index;  // the n-gram proposer's index of this request's tokens

  // Output text, built incrementally; stop strings are cut from it.
  std::unique_ptr<IncrementalDetokenizer> detokenizer;
  StopChecker stop_checker;
  std::string output_text;
  size_t num_text_bytes_sent = 0;      // streamed so far (see LLMEngine::step)
  std::vector<SampledToken> logprobs;  // one per output token when params.logprobs >= 0
  // Filled while the prompt is computed when params.prompt_logprobs >= 0
  // (null otherwise); shared with outputs once complete (never changed then).
  std::shared_ptr<PromptLogprobs> prompt_logprobs;

  Clock::time_point arrival_time = Clock::now();
  Clock::time_point first_token_time{};
  Clock::time_point finish_time{};

  int64_t num_tokens() const { return static_cast<int64_t>(prompt_ids.size() + output_ids.size()); }
  // Token at position i; positions from num_tokens() on are draft tokens.
  int32_t token_at(int64_t i) const {
    const auto p = static_cast<int64_t>(prompt_ids.size());
    if (i < p) return prompt_ids[i];
    const auto o = static_cast<int64_t>(output_ids.size());
    return i - p < o ? output_ids[i - p] : spec_token_ids[i - p - o];
  }
  bool finished() const { return status == RequestStatus::Finished; }
  // Still needs logits rows of prompt positions: such a request must compute
  // its prompt rather than take it from the prefix cache.
  bool scoring_prompt() const { return prompt_logprobs && !prompt_logprobs->complete(); }
  // Prompt followed by the output so far (what a recompute must cover).
  std::vector<int32_t> all_tokens() const {
    std::vector<int32_t> t = prompt_ids;
    t.insert(t.end(), output_ids.begin(), output_ids.end());
    return t;
  }
};

}  // namespace pagoda
