// The `mtp` proposer: DeepSeek's multi-token-prediction layer drafts the
// next tokens (spec §3.1.5, §3.2.7; vLLM's EAGLE/MTP proposer). The layer
// pairs the main model's hidden state at position p (V3: after the final
// norm; V4: the final hc streams) with the token at p + 1 and predicts the
// token at p + 2. Its K/V is one more layer after the target's (V3: MLA;
// V4: a sliding window; proposer.h: same pools and block tables, so
// rollback, preemption and freeing cover it); Request::num_proposer_computed_tokens
// counts the positions whose entry pairs the target's hidden state with the
// request's own next token.
//
// Each step, after verification and the appends, over every request of the
// step that goes on:
//  * catch-up pass: the positions the target computed since
//    (num_proposer_computed_tokens up to num_computed_tokens: prompt
//    chunks, the last token, the accepted drafts), each with the token after
//    it (the next prompt token or the one just sampled), so the layer's
//    cache covers every position through chunked prefill, preemption
//    (recomputed with the rest) and prefix hits. An entry depends on the
//    token after its position, which a block's hash does not cover, so a
//    prefix hit gives up its last block (KVCacheManager::
//    set_drop_last_hit_block). Its logits at a drafting request's last
//    position give draft 1; every other position only writes the layer's
//    cache entry (the input projections and the K/V write, not the block's
//    attention, FFN and head: CausalLM::mtp_forward), so a request that
//    does not draft (its prompt, adaptive switch-off) costs little. Such a
//    request may also defer its positions: it keeps the target's hidden
//    states (Request::mtp_deferred_hidden, up to kMaxDeferredPositions
//    positions behind) and catches up in one pass, whose projections read
//    the weights once for all those rows, when it drafts again or the
//    limit is reached. Until then the prefix cache registers its blocks
//    only up to where the layer stands (as for the draft model); beside
//    sliding-window caches (DeepSeek V4's MTP block) it keeps up instead,
//    since a request's sliding pages are released only behind both.
//  * chain passes: draft j + 1 from the pair (the layer's own output at the
//    previous position, draft j) one position further, as vLLM reuses its
//    one MTP layer k times. These entries are not the request's (they pair
//    the layer's output, not the target's hidden state) and are not
//    counted: the next catch-up pass writes those positions again before
//    any later position reads them.
// Drafts are the argmax of the layer's logits: a point mass for the
// rejection sampler, so verification stays exact at any temperature.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "engine/request.h"
#include "engine/spec_decode/adaptive_speculation.h"
#include "engine/spec_decode/proposer.h"
#include "engine/spec_decode/speculative_config.h"
#include "kv/kv_cache_manager.h"
#include "models/model.h"

namespace pagoda {

class MtpProposer : public Proposer {
 public:
  // `model` is the target, its MTP layer enabled (CausalLM::enable_mtp).
  explicit MtpProposer(CausalLM& model);

  std::vector<LayerKVCache> kv_cache_specs(DType kv_dtype) const override {
    return model_.mtp_kv_cache_specs(kv_dtype);
  }
  void bind_kv_cache(const KVCachePlan& plan, KVCacheMemory& memory, int32_t first_layer,
                     KVCacheManager& kv) override;
  void propose(const ProposeStep& step) override;
  double forward_seconds() const override { return forward_seconds_; }
  // One MTP pass reads the layer's and the head's weights: that share of a
  // target step per draft token (the adaptive break-even; the target's
  // verify step reading more experts than a plain step is the engine's
  // part: CausalLM::expected_weight_bytes_per_step).
  double cost_per_draft_token() const override {
    const int64_t target = model_.weight_bytes_per_step();
    return target > 0 ? static_cast<double>(model_.mtp_weight_bytes_per_step()) / target : 0;
  }

  // Tests (`pagoda logits --mtp-out`): sees the catch-up pass's logits at
  // every position (the pass then computes them all, deferring none), or
  // only at the positions draft 1 is taken from, and every draft.
  struct Observer {
    using Logits = std::function<void(const std::string& request_id, int64_t position,
                                      const float* logits, int64_t vocab)>;
    Logits logits, draft_logits;
    std::function<void(const std::string& request_id, int64_t num_tokens,
                       std::span<const int32_t> drafts)>
        drafts;
  };
  void set_observer(Observer observer) { observer_ = std::move(observer); }

  // How far the layer may fall behind the target in a request that does
  // not draft (its prompt chunks, outputs while the adaptive switch is
  // off). Between two probes of the switch a request adds one position per
  // step (kReprobeInterval - 1 steps) after the accepted tokens of the step
  // that switched it off (num_speculative_tokens + 1 at most): twice the
  // interval covers that for any k up to it, so a switched-off request
  // catches up once per probe. It bounds the hidden states a deferring
  // request keeps (kMaxDeferredPositions x mtp_hidden_size floats).
  static constexpr int64_t kMaxDeferredPositions = 2 * AdaptiveSpeculation::kReprobeInterval;
  static_assert(kMaxDeferredPositions >= AdaptiveSpeculation::kReprobeInterval - 1 +
                                             SpeculativeConfig::kMaxSpeculativeTokens + 1,
                "a switched-off request would catch up more than once per probe");

 private:
  // A pass's sequences: `count` positions of `request` from `first_position`.
  struct Seq {
    const Request* request;
    int64_t first_position, count;
  };
  // Turns seqs_ (whose tokens and hidden rows the caller put in batch_
  // .token_ids and hidden_in_) into the pass's batch: positions, slots and
  // block tables from each request's own pages; then runs the layer with
  // logits (and output hidden states) at batch_.logits_indices.
  void run_pass();

  CausalLM& model_;
  KVCacheMemory* memory_ = nullptr;
  KVCacheManager* kv_ = nullptr;
  int64_t hidden_size_, vocab_size_;
  double forward_seconds_ = 0;
  Observer observer_;
  bool defers_ = true;  // no sliding-window caches (header)
  // The pass being built and its inputs and outputs (reused memory).
  std::vector<Seq> seqs_;
  BatchMetadata batch_;
  std::vector<float> hidden_in_, hidden_out_, logits_;
};

}  // namespace pagoda
