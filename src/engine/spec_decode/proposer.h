// What the engine asks of a speculative-decoding proposer (vLLM's
// NgramProposer / DraftModelProposer / EagleProposer share this role):
// after each step's verification, draft the tokens each request's next
// step verifies (Request::spec_token_ids).
//
// A proposer that runs a model of its own (a draft model, DeepSeek's MTP
// layers) keeps K/V per position of each request, like the target: its
// caches join the target's KV-cache plan as extra layers after the
// target's (the same pools and block tables, so rollback, preemption and
// freeing cover them), and Request::num_proposer_computed_tokens says how
// many positions of the request's tokens (then its drafts) those caches
// hold. The prefix cache registers a block only once both the target and
// the proposer computed it (Scheduler), so a hit serves both.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/dtype.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "kv/kv_cache_memory.h"
#include "kv/kv_cache_plan.h"
#include "kv/kv_cache_spec.h"

namespace pagoda {

class KVCacheManager;

// One request the engine hands a proposer after a step.
struct ProposalRequest {
  Request* request = nullptr;
  // Drafts wanted (at most; 0: none this step: the request is still in its
  // prompt, constrained, switched off by the adaptive rule or out of room).
  // A proposer with caches still computes the request's new tokens.
  int32_t num_drafts = 0;
};

// The step the requests come from.
struct ProposeStep {
  // Every request that ran in the step and goes on (not finished), in the
  // step's order.
  std::span<const ProposalRequest> requests;
  // The target's step (a proposer that reads the target's hidden states
  // finds their rows through it).
  const SchedulerOutput* sched = nullptr;
};

class Proposer {
 public:
  virtual ~Proposer() = default;

  // The caches the proposer keeps (layers numbered from 0) for a cache of
  // kv_dtype elements; none for a proposer without a model (n-gram).
  virtual std::vector<LayerKVCache> kv_cache_specs(DType kv_dtype) const {
    (void)kv_dtype;
    return {};
  }
  // Once the engine built the pools: the proposer's caches are the plan's
  // layers from first_layer on, in `memory`; `kv` hands out the pages its
  // drafts' positions need. Called only for a proposer with caches.
  virtual void bind_kv_cache(const KVCachePlan& plan, KVCacheMemory& memory, int32_t first_layer,
                             KVCacheManager& kv) {
    (void)plan, (void)memory, (void)first_layer, (void)kv;
  }
  // Sets each request's spec_token_ids (up to num_drafts tokens, possibly
  // none) and, for a proposer with caches, advances its
  // num_proposer_computed_tokens over what it computed.
  virtual void propose(const ProposeStep& step) = 0;
  // What drafting one token costs, as a share of a plain decode step of the
  // target (the adaptive switch adds it to the break-even); 0 for a lookup.
  virtual double cost_per_draft_token() const { return 0; }
  // Seconds the proposer's own model spent in forward passes so far (0
  // without one): part of the engine's model time.
  virtual double forward_seconds() const { return 0; }
};

}  // namespace pagoda
