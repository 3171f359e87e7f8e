#include "engine/scheduler.h"

#include <algorithm>

#include "core/error.h"

namespace pagoda {

Scheduler::Scheduler(const SchedulerConfig& config, KVCacheManager& kv)
    : config_(config), kv_(kv) {}

namespace {

// True when a is scheduled before b under the priority policy.
bool goes_before(const Request* a, const Request* b) {
  if (a->params.priority != b->params.priority) return a->params.priority < b->params.priority;
  return a->arrival_time < b->arrival_time;
}

}  // namespace

void Scheduler::add(Request* request) {
  if (config_.policy == SchedulingPolicy::Priority) {
    insert_waiting_by_priority(request);
  } else {
    waiting_.push_back(request);
  }
}

void Scheduler::insert_waiting_by_priority(Request* request) {
  const auto it = std::find_if(waiting_.begin(), waiting_.end(),
                               [&](const Request* w) { return goes_before(request, w); });
  waiting_.insert(it, request);
}

bool Scheduler::ensure_blocks(Request* request, int64_t num_tokens) {
  // A sliding group keeps the pages a query of the proposer's caches still
  // reads: a draft model behind the target (switched off, then catching up
  // when it probes) would otherwise read pages handed to other requests.
  return kv_.allocate(request->kv, num_cacheable_tokens(request), num_tokens);
}

int64_t Scheduler::tokens_to_schedule(const Request* request, int64_t budget,
                                      int64_t scoring_budget) const {
  // A decoding request verifies its drafts in the same step: 1 + k tokens,
  // as many drafts as the budget allows.
  const int64_t remaining = request->num_tokens() - request->num_computed_tokens;
  const int64_t drafts =
      remaining == 1 ? static_cast<int64_t>(request->spec_token_ids.size()) : 0;
  const int64_t n = std::min(remaining + drafts, budget);
  return request->scoring_prompt() ? std::min(n, scoring_budget) : n;
}

int64_t Scheduler::num_drafts_in(const Request* request, int64_t num_new_tokens) {
  return std::max<int64_t>(
      0, request->num_computed_tokens + num_new_tokens - request->num_tokens());
}

void Scheduler::preempt(Request* request) {
  kv_.free(request->kv);
  request->spec_token_ids.clear();
  request->num_computed_tokens = 0;  // recomputed from scratch when resumed
  request->num_proposer_computed_tokens = 0;
  std::vector<float>().swap(request->mtp_deferred_hidden);  // recomputed too; its memory back now
  request->status = RequestStatus::Waiting;
  request->num_preemptions++;
  ++num_preemptions_;
  if (config_.policy == SchedulingPolicy::Priority) {
    insert_waiting_by_priority(request);
  } else {
    waiting_.push_front(request);
  }
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  int64_t budget = config_.max_num_batched_tokens;
  int64_t scoring_budget = config_.max_num_scored_prompt_tokens;
  if (config_.policy == SchedulingPolicy::Priority) {
    // Equal priorities keep admission order, so the back is the victim.
    std::stable_sort(running_.begin(), running_.end(), [](const Request* a, const Request* b) {
      return a->params.priority < b->params.priority;
    });
  }

  // Running requests, oldest first; the newest are preempted to make room.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Request* r = running_[i];
    int64_t n = tokens_to_schedule(r, budget, scoring_budget);
    if (n == 0) {  // the scoring cap is spent: this one waits a step
      ++i;
      continue;
    }
    bool scheduled = true;
    while (!ensure_blocks(r, r->num_computed_tokens + n)) {
      // A long prefill chunk needs pages for all of its positions at once
      // (sliding-window groups too, though they release most of them after
      // the step; a compressor state with 4-position pages needs 64 for a
      // 256-token chunk): a smaller chunk is tried before anyone is
      // preempted.
      if (n > 1) {
        n = std::max<int64_t>(1, n / 2);
        continue;
      }
      Request* victim = running_.back();
      running_.pop_back();
      preempt(victim);
      out.preempted.push_back(victim);
      if (victim == r) {
        scheduled = false;
        break;
      }
    }
    if (!scheduled) break;
    out.scheduled.push_back({r, n, num_drafts_in(r, n), r->num_computed_tokens});
    budget -= n;
    if (r->scoring_prompt()) scoring_budget -= n;
    ++i;
  }

  // Waiting requests, in order, while budget, sequence slots and blocks last.
  // Nothing new is admitted in a step that had to preempt.
  while (out.preempted.empty() && !waiting_.empty() && budget > 0 &&
         static_cast<int32_t>(running_.size()) < config_.max_num_seqs) {
    Request* r = waiting_.front();
    // Skip whatever the prefix cache already holds, except for a request
    // that still scores its prompt (prompt_logprobs): a hit would skip the
    // positions whose logits it reports. Its blocks are still cached after
    // each step (on_step_done) for the requests that follow.
    if (r->num_computed_tokens == 0 && !r->scoring_prompt()) {
      r->num_computed_tokens = kv_.take_cached_prefix(r->kv, r->all_tokens());
      if (!r->admitted_before) r->num_cached_tokens = r->num_computed_tokens;
      // A cached block holds the proposer's K/V too (cache_full_blocks).
      r->num_proposer_computed_tokens = r->num_computed_tokens;
    }
    int64_t n = tokens_to_schedule(r, budget, scoring_budget);
    if (n == 0) break;  // the scoring cap is spent; admission stays in order
    bool admitted = ensure_blocks(r, r->num_computed_tokens + n);
    // As above: a prompt chunk too large for the pool at once is halved
    // (down to one token, whose pages an empty pool always holds:
    // min_blocks), or a request alone could wait forever.
    while (!admitted && n > 1) {
      n = std::max<int64_t>(1, n / 2);
      admitted = ensure_blocks(r, r->num_computed_tokens + n);
    }
    if (!admitted) {
      kv_.free(r->kv);  // give the prefix hits back; retry next step
      r->num_computed_tokens = 0;
      r->num_proposer_computed_tokens = 0;
      break;
    }
    r->admitted_before = true;
    waiting_.pop_front();
    r->status = RequestStatus::Running;
    running_.push_back(r);
    out.scheduled.push_back({r, n, num_drafts_in(r, n), r->num_computed_tokens});
    budget -= n;
    if (r->scoring_prompt()) scoring_budget -= n;
  }
  return out;
}

void Scheduler::on_step_done(const SchedulerOutput& out) {
  for (const ScheduledRequest& s : out.scheduled) {
    Request* r = s.request;
    r->num_computed_tokens += s.num_new_tokens - s.num_spec_tokens;
    // A verify step clamps once the accepted drafts are counted.
    if (s.num_spec_tokens == 0) clamp_proposer_computed(r);
    cache_full_blocks(r);
  }
}

int64_t Scheduler::num_cacheable_tokens(const Request* r) const {
  return config_.proposer_keeps_kv
             ? std::min(r->num_computed_tokens, r->num_proposer_computed_tokens)
             : r->num_computed_tokens;
}

void Scheduler::clamp_proposer_computed(Request* r) const {
  // Positions below num_computed_tokens hold accepted tokens, which the
  // proposer fed where it fed a draft (an accepted draft is that token);
  // from there on it fed drafts that were rejected or never verified.
  r->num_proposer_computed_tokens =
      std::min(r->num_proposer_computed_tokens, r->num_computed_tokens);
}

void Scheduler::cache_full_blocks(Request* r) {
  const int64_t n = num_cacheable_tokens(r);
  if (kv_.prefix_caching() && n / kv_.block_size() > r->kv.num_cached_blocks) {
    kv_.cache_full_blocks(r->kv, r->all_tokens(), n);
  }
}

void Scheduler::on_drafts_verified(Request* r, int64_t num_accepted) {
  PAGODA_CHECK(!r->finished(), "request {} verified after it finished", r->request_id);
  r->num_computed_tokens += num_accepted;
  PAGODA_CHECK(r->num_computed_tokens == r->num_tokens() - 1,
               "request {}: {} computed of {} tokens after verification", r->request_id,
               r->num_computed_tokens, r->num_tokens());
  clamp_proposer_computed(r);
  // The next step computes the last token (the corrected or bonus one), so
  // pages up to it stay; any page past it held only rejected drafts (the
  // proposer's draft positions too).
  kv_.free_tail(r->kv, r->num_tokens());
  cache_full_blocks(r);
}

void Scheduler::finish(Request* request) {
  kv_.free(request->kv);
  running_.erase(std::remove(running_.begin(), running_.end(), request), running_.end());
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), request), waiting_.end());
  request->status = RequestStatus::Finished;
}

}  // namespace pagoda
