// The `mtp` proposer: DeepSeek's multi-token-prediction layer drafts the
// next tokens (spec §3.1.5; vLLM's EAGLE/MTP proposer). The layer pairs the
// main model's hidden state at position p with the token at p + 1 and
// predicts the token at p + 2; it keeps its own K/V (one more MLA layer in
// the same KV groups, so it shares their block tables and slots).
//
// Two kinds of pass, both after the main model's step:
//  * catch-up (run_after_step, before the step's tokens are appended): every
//    position the step computed whose hidden state stands (prompt chunks,
//    the last token, the accepted drafts) with the token after it: the
//    next prompt token, or the token just sampled. So the layer's cache
//    covers each position exactly as the request's own tokens give it,
//    through chunked prefill, prefix hits (KVCacheManager drops the last
//    hit block) and preemption (recomputed with the rest). Its logits at a
//    request's last position give draft 1.
//  * chain (propose): draft j + 1 from the pair (the layer's own output at
//    the previous position, draft j) one position further, as vLLM reuses
//    its one MTP layer k times. These entries sit at positions the next
//    step computes again, so its catch-up pass overwrites them before any
//    later position reads them.
// Drafts are the argmax of the layer's logits: a point mass for the
// rejection sampler, so verification stays exact at any temperature.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/model_runner.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "kv/kv_cache_manager.h"
#include "models/model.h"

namespace pagoda {

class MtpProposer {
 public:
  MtpProposer(CausalLM& model, ModelRunner& runner, KVCacheManager& kv);

  // After the main model ran `sched` (logits rows `rows`) and sampled:
  // sampled[i] / num_accepted[i] are sampling row i's emitted tokens and
  // accepted drafts; nothing appended yet.
  void run_after_step(const SchedulerOutput& sched, const StepLogits& rows,
                      std::span<const std::vector<SampledToken>> sampled,
                      std::span<const int32_t> num_accepted);

  // A request to draft for after run_after_step and the appends: up to
  // `max_drafts` (>= 1) tokens into request->spec_token_ids.
  struct Draft {
    Request* request;
    int32_t max_drafts;
  };
  void propose(std::span<const Draft> drafts);

  // Tests (`pagoda logits --mtp-out`): sees the catch-up pass's logits at
  // every position (the pass then computes them all), and every draft.
  struct Observer {
    std::function<void(const std::string& request_id, int64_t position, const float* logits,
                       int64_t vocab)>
        logits;
    std::function<void(const std::string& request_id, int64_t num_tokens,
                       std::span<const int32_t> drafts)>
        drafts;
  };
  void set_observer(Observer observer) { observer_ = std::move(observer); }

 private:
  // A pass's sequences: `count` tokens of `request` from `first_position`.
  struct Seq {
    const Request* request;
    int64_t first_position, count;
  };
  // Turns seqs_ (whose tokens and hidden rows the caller put in batch_
  // .token_ids and hidden_in_) into the pass's batch: positions, slots and
  // block tables from each request's own pages; then runs it with logits
  // (and output hidden states) at batch_.logits_indices.
  void run_pass();

  CausalLM& model_;
  ModelRunner& runner_;
  KVCacheManager& kv_;
  int64_t hidden_size_, vocab_size_;
  Observer observer_;
  // The pass being built and its inputs and outputs (reused memory).
  std::vector<Seq> seqs_;
  BatchMetadata batch_;
  std::vector<float> hidden_in_, hidden_out_, logits_;
  // After run_after_step: each sampling request's row (its last position)
  // in first_logits_ / first_hidden_.
  std::unordered_map<const Request*, int32_t> last_row_;
  std::vector<float> first_logits_, first_hidden_;
};

}  // namespace pagoda
