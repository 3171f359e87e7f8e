// Decides, each step, which requests run and how many of their tokens each
// computes (vLLM v1 style): running requests first (decodes and prefill
// chunks), then waiting ones, under a token budget and a sequence cap, so
// decode tokens and chunks of long prompts share one batch. When the block
// pool runs dry the most recently admitted request is preempted: its blocks
// are freed and it is recomputed later. Under the priority policy both
// queues are kept in (priority, arrival) order, so "newest" means "lowest
// priority, newest among equals".
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "engine/request.h"
#include "kv/kv_cache_manager.h"

namespace pagoda {

// Fcfs: arrival order. Priority: by (priority, arrival); the running request
// of the lowest priority (latest among equals) is preempted first.
enum class SchedulingPolicy { Fcfs, Priority };

struct SchedulerConfig {
  int32_t max_num_seqs = 256;
  int32_t max_num_batched_tokens = 2048;
  int32_t block_size = 16;
  SchedulingPolicy policy = SchedulingPolicy::Fcfs;
  // Most tokens a step computes for requests that score their prompt
  // (prompt_logprobs): each such token is a logits row of vocab_size floats
  // (2048 rows of a 151936 vocabulary would be 1.2 GiB), so their chunks
  // share this cap on top of the token budget.
  int32_t max_num_scored_prompt_tokens = 512;
  // The speculative proposer keeps K/V of its own in the requests' blocks
  // (a draft model, an MTP layer): a block is offered to the prefix cache only once the
  // proposer computed it too (Request::num_proposer_computed_tokens).
  bool proposer_keeps_kv = false;
};

struct ScheduledRequest {
  Request* request = nullptr;
  // Tokens to compute this step, from num_computed_tokens; the last
  // num_spec_tokens of them are the request's first draft tokens
  // (Request::spec_token_ids), verified this step.
  int64_t num_new_tokens = 0;
  int64_t num_spec_tokens = 0;
  // The request's num_computed_tokens when scheduled: the position of its
  // first new token.
  int64_t first_position = 0;
};

struct SchedulerOutput {
  std::vector<ScheduledRequest> scheduled;
  std::vector<Request*> preempted;
  bool empty() const { return scheduled.empty(); }
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, KVCacheManager& kv);

  void add(Request* request);  // joins the waiting queue in policy order
  SchedulerOutput schedule();
  // After the step ran: advances num_computed_tokens of the scheduled
  // requests past their real tokens (not the drafts) and offers their
  // newly full blocks to the prefix cache.
  void on_step_done(const SchedulerOutput& out);
  // After a request's drafts were verified and the accepted ones (plus the
  // corrected or bonus token) appended to its output: counts the accepted
  // drafts' K/V as computed, gives back the pages past its tokens (those
  // held only rejected drafts) and caches the blocks now full of accepted
  // tokens. Rejected positions are never counted computed, so no cached
  // block holds one. Not for a finished request (finish freed its blocks).
  void on_drafts_verified(Request* request, int64_t num_accepted);
  // Releases a finished or aborted request's blocks and drops it from the queues.
  void finish(Request* request);
  // Offers the request's newly full blocks that the target (and a proposer
  // with caches) computed to the prefix cache; the engine calls it again
  // after the proposer ran.
  void cache_full_blocks(Request* request);

  size_t num_waiting() const { return waiting_.size(); }
  size_t num_running() const { return running_.size(); }
  bool has_unfinished() const { return !waiting_.empty() || !running_.empty(); }
  // Preemptions since start, over all requests (for /metrics).
  int64_t num_preemptions() const { return num_preemptions_; }
  const std::deque<Request*>& waiting() const { return waiting_; }
  const std::vector<Request*>& running() const { return running_; }

 private:
  // Makes sure the request has blocks for `num_tokens` tokens.
  bool ensure_blocks(Request* request, int64_t num_tokens);
  // Tokens the request still has to compute, capped by the step budget
  // (and, while it scores its prompt, by what is left of the scoring cap).
  int64_t tokens_to_schedule(const Request* request, int64_t budget, int64_t scoring_budget) const;
  // How many of num_new_tokens scheduled from num_computed_tokens are drafts.
  static int64_t num_drafts_in(const Request* request, int64_t num_new_tokens);
  // Positions of a request whose K/V every model keeping it computed.
  int64_t num_cacheable_tokens(const Request* request) const;
  // After a step: the proposer's K/V past what the target computed held
  // drafts that were not accepted (or not verified).
  void clamp_proposer_computed(Request* request) const;
  void preempt(Request* request);
  // Inserts into waiting_ after every request that goes before it.
  void insert_waiting_by_priority(Request* request);

  SchedulerConfig config_;
  KVCacheManager& kv_;
  std::deque<Request*> waiting_;
  std::vector<Request*> running_;  // in admission order
  int64_t num_preemptions_ = 0;
};

}  // namespace pagoda
