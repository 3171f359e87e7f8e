// The draft-model proposer (vLLM's "draft_model" method): a smaller
// checkpoint with the target's tokenizer drafts k tokens greedily, one
// forward pass per token, over a batch of its own.
//
// Its K/V lives in the target's pools (proposer.h): its layers are extra
// layers of the engine's KV plan, so each request's block tables, page
// rollback (free_tail), preemption and prefix caching cover them. Each
// step, after verification, it runs over every request of the step that
// goes on:
//  * first pass: the positions its caches lack (Request::
//    num_proposer_computed_tokens on): for a request that drafts, up to
//    its last token (the bonus or corrected one), whose logits give draft
//    1; for one that does not draft, its prompt as far as the target
//    computed it, so prompt blocks enter the prefix cache as the target
//    computes them. After a verification that position is usually just the
//    new token: the drafts it fed last step at their positions and the
//    target accepted are that K/V already. Output tokens of a request that
//    does not draft (the adaptive switch turned it off, a grammar, no
//    room) are not fed: it catches up when it drafts again (one pass over
//    the tokens it missed), so a switched-off request costs no draft pass;
//    until then the prefix cache registers its output blocks only up to
//    where the draft stopped. Beside sliding-window caches (DeepSeek V4's
//    windows and compressor states, the target's or the draft's) it feeds
//    every computed token instead: a request's sliding pages are released
//    only behind both models (Scheduler::ensure_blocks), so a draft left
//    behind would hold them.
//    Rejected drafts roll back as for the target (llm_engine.cpp): every
//    cache is indexed by position, and rewritten before it is read.
//  * k - 1 more passes of one token each: draft j at its position gives
//    draft j + 1.
// Drafts are the argmax of the draft's logits. At temperature > 0 the
// verification treats them as a point mass (q(d) = 1: accept with
// probability p(d), else draw from p without d), which keeps the output
// exactly the target's distribution; vLLM's draft-model and EAGLE
// proposers draft greedily and pass no draft probabilities either.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/model_runner.h"
#include "engine/spec_decode/proposer.h"
#include "models/model.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {

class DraftModelProposer : public Proposer {
 public:
  // Loads the draft in `dir` (weights as the target's: `weights`) and checks
  // it can draft for `target`: caches of one entry per position, the same
  // vocabulary size, tokenizer and BOS/EOS. InputError otherwise. (Its
  // trained context may be shorter than the target's: RoPE has no hard
  // limit, and drafts past it are only accepted less often.)
  DraftModelProposer(const std::string& dir, const CausalLM& target,
                     const Tokenizer& target_tokenizer, const WeightOptions& weights,
                     parallel::Communicator& comm);

  std::vector<LayerKVCache> kv_cache_specs(DType kv_dtype) const override;
  void bind_kv_cache(const KVCachePlan& plan, KVCacheMemory& memory, int32_t first_layer,
                     KVCacheManager& kv) override;
  void propose(const ProposeStep& step) override;
  double forward_seconds() const override { return runner_ ? runner_->forward_seconds() : 0; }
  // A decode pass is bound by reading the weights once (as the target's):
  // the draft's weight bytes over the target's.
  double cost_per_draft_token() const override { return cost_per_draft_token_; }

  const CausalLM& model() const { return *model_; }

 private:
  struct Drafting {
    Request* request;
    int64_t first_position;  // of draft 1: the request's token count
    int32_t num_drafts;
  };

  std::unique_ptr<CausalLM> model_;
  parallel::Communicator& comm_;
  std::unique_ptr<ModelRunner> runner_;
  KVCacheManager* kv_ = nullptr;
  double cost_per_draft_token_ = 0;
  bool feeds_outputs_ = false;  // the plan has sliding groups: keep up with every token (header)
  std::vector<ProposerSequence> seqs_;  // scratch
  std::vector<Drafting> drafting_;      // scratch
};

}  // namespace pagoda
