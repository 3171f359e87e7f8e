#include "engine/spec_decode/mtp_proposer.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <unordered_map>

#include "core/error.h"
#include "engine/model_runner.h"
#include "engine/sampler.h"

namespace pagoda {

MtpProposer::MtpProposer(CausalLM& model)
    : model_(model),
      hidden_size_(model.mtp_hidden_size()),
      vocab_size_(model.config().vocab_size) {}

void MtpProposer::bind_kv_cache(const KVCachePlan& plan, KVCacheMemory& memory,
                                int32_t first_layer, KVCacheManager& kv) {
  PAGODA_CHECK(first_layer == model_.config().num_hidden_layers,
               "the MTP layer's cache is plan layer {}, after {} layers", first_layer,
               model_.config().num_hidden_layers);
  memory_ = &memory;
  kv_ = &kv;
  // Beside sliding-window caches a request's pages are released only
  // behind both models: keep up with every token there (as the draft
  // model does).
  for (const KVCacheGroup& g : plan.groups) defers_ = defers_ && g.spec.sliding_window == 0;
  batch_.kv_groups.resize(kv.groups().size());
  for (size_t g = 0; g < kv.groups().size(); ++g) {
    batch_.kv_groups[g].block_size = kv.groups()[g].block_size;
  }
}

void MtpProposer::run_pass() {
  BatchMetadata& b = batch_;
  b.positions.clear();
  b.query_start_loc.assign(1, 0);
  b.seq_lens.clear();
  for (KVGroupMetadata& gm : b.kv_groups) gm.slot_mapping.clear();
  for (const Seq& s : seqs_) {
    append_sequence(b, kv_->groups(), s.request->kv.block_tables, s.first_position,
                    s.first_position + s.count);
  }
  PAGODA_CHECK(b.positions.size() == b.token_ids.size() &&
                   hidden_in_.size() == b.token_ids.size() * static_cast<size_t>(hidden_size_),
               "MTP pass: {} positions, {} tokens", b.positions.size(), b.token_ids.size());
  // Each sequence's own block-table row, copied from its pages (O(pages of
  // the pass's requests), next to a decoder layer's work per token).
  for (size_t g = 0; g < b.kv_groups.size(); ++g) {
    KVGroupMetadata& gm = b.kv_groups[g];
    size_t stride = 1;
    for (const Seq& s : seqs_) stride = std::max(stride, s.request->kv.block_tables[g].size());
    gm.max_blocks_per_seq = static_cast<int32_t>(stride);
    gm.block_tables.assign(seqs_.size() * stride, 0);
    gm.block_table_rows.clear();
    for (size_t i = 0; i < seqs_.size(); ++i) {
      const std::vector<int32_t>& table = seqs_[i].request->kv.block_tables[g];
      for (size_t j = 0; j < table.size(); ++j) gm.block_tables[i * stride + j] = std::max(table[j], 0);
    }
  }
  const size_t rows = b.logits_indices.size();
  logits_.resize(rows * static_cast<size_t>(vocab_size_));
  hidden_out_.resize(rows * static_cast<size_t>(hidden_size_));
  const auto start = std::chrono::steady_clock::now();
  // The whole plan's layers: the target's, then the MTP layer's.
  model_.mtp_forward(b, hidden_in_.data(), memory_->view(), logits_.data(), hidden_out_.data());
  forward_seconds_ +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void MtpProposer::propose(const ProposeStep& step) {
  PAGODA_CHECK(kv_ != nullptr, "the MTP layer's cache is not bound");
  const float* hidden = model_.mtp_hidden_states();
  PAGODA_CHECK(hidden != nullptr, "the model keeps no hidden states for MTP");
  const auto h = static_cast<size_t>(hidden_size_);
  // Each scheduled request's first row in the target's step (its rows are
  // consecutive, in schedule order).
  std::unordered_map<const Request*, std::pair<int64_t, const ScheduledRequest*>> rows_of;
  int64_t row = 0;
  for (const ScheduledRequest& s : step.sched->scheduled) {
    rows_of[s.request] = {row, &s};
    row += s.num_new_tokens;
  }
  // Catch-up pass.
  seqs_.clear();
  batch_.token_ids.clear();
  batch_.logits_indices.clear();
  hidden_in_.clear();
  struct Drafting {
    Request* request;
    int32_t num_drafts;
    size_t row;  // of its last position in the catch-up pass's outputs
    // Where the catch-up pass started: sliding groups keep the pages from
    // its window on until the blocks it completed are registered
    // (LLMEngine::propose_drafts), so a hit at their boundaries finds them.
    int64_t caught_up_from;
  };
  std::vector<Drafting> drafting;
  for (const ProposalRequest& p : step.requests) {
    Request& r = *p.request;
    r.spec_token_ids.clear();
    const int64_t n = r.num_tokens();
    kv_->free_tail(r.kv, n);  // pages of an earlier chain past the tokens
    // The layer stands at `from`; the target's hidden states of the
    // positions it deferred follow (a preemption recomputes them), then
    // the step's rows up to num_computed.
    std::vector<float>& deferred = r.mtp_deferred_hidden;
    const int64_t from = r.num_proposer_computed_tokens, to = r.num_computed_tokens;
    const int64_t step_from = from + static_cast<int64_t>(deferred.size() / h);
    const auto it = rows_of.find(&r);
    PAGODA_CHECK(it != rows_of.end() && step_from == it->second.second->first_position &&
                     to >= step_from && to - step_from <= it->second.second->num_new_tokens,
                 "request {}: the MTP layer is at {} (+{} deferred) of {} computed positions; "
                 "the step's rows start at {}",
                 r.request_id, from, step_from - from, to,
                 it == rows_of.end() ? -1 : it->second.second->first_position);
    const float* step_rows = hidden + static_cast<size_t>(it->second.first) * h;
    // The rows whose outputs are used: the last of a drafting request,
    // which computed up to its last token, whose successor is draft 1 (the
    // layer at position n - 2 predicts position n). The others only write
    // the layer's cache entries (mtp_forward), unless an observer sees
    // every row's logits; a request that does not draft may also leave
    // that for later (below).
    const bool drafts = p.num_drafts > 0 && to == n - 1;
    if (!drafts && defers_ && !observer_.logits && to - from <= kMaxDeferredPositions) {
      deferred.insert(deferred.end(), step_rows, step_rows + (to - step_from) * h);
      continue;
    }
    if (from == to) continue;
    for (int64_t pos = from; pos < to; ++pos) {  // position pos pairs with token pos + 1
      batch_.token_ids.push_back(r.token_at(pos + 1));
    }
    hidden_in_.insert(hidden_in_.end(), deferred.begin(), deferred.end());
    hidden_in_.insert(hidden_in_.end(), step_rows, step_rows + (to - step_from) * h);
    std::vector<float>().swap(deferred);  // a request that drafts again may not defer for long
    const auto end = static_cast<int32_t>(batch_.token_ids.size());
    if (observer_.logits) {
      for (int32_t t = end - static_cast<int32_t>(to - from); t < end; ++t) {
        batch_.logits_indices.push_back(t);
      }
    } else if (drafts) {
      batch_.logits_indices.push_back(end - 1);
    }
    if (drafts) drafting.push_back({&r, p.num_drafts, batch_.logits_indices.size() - 1, from});
    seqs_.push_back({&r, from, to - from});
    r.num_proposer_computed_tokens = to;
  }
  if (seqs_.empty()) return;
  run_pass();
  if (observer_.logits) {
    size_t i = 0;
    for (const Seq& s : seqs_) {
      for (int64_t pos = s.first_position; pos < s.first_position + s.count; ++pos, ++i) {
        observer_.logits(s.request->request_id, pos, logits_.data() + i * vocab_size_,
                         vocab_size_);
      }
    }
  }
  // Draft 1 of each; the chains that go on keep the layer's output.
  std::vector<Drafting> chains;
  std::vector<float> prev_hidden;  // [chains, hidden]
  for (Drafting& d : drafting) {
    Request& r = *d.request;
    if (observer_.draft_logits) {
      observer_.draft_logits(r.request_id, r.num_tokens() - 2,
                             logits_.data() + d.row * vocab_size_, vocab_size_);
    }
    const int32_t token =
        greedy_token(std::span<const float>(logits_.data() + d.row * vocab_size_, vocab_size_));
    if (token == kNoToken) continue;  // no finite logit: no draft
    r.spec_token_ids.push_back(token);
    // The chain writes the layer's entries at positions n - 1 ...
    // n + num_drafts - 3, pages the next verification needs anyway; with
    // none to spare, one draft.
    const int64_t n = r.num_tokens();
    if (d.num_drafts > 1 && kv_->allocate(r.kv, d.caught_up_from, n + d.num_drafts - 2)) {
      chains.push_back(d);
      const float* x = hidden_out_.data() + d.row * h;
      prev_hidden.insert(prev_hidden.end(), x, x + h);
    }
  }
  for (int32_t j = 1; !chains.empty(); ++j) {
    // Draft j + 1 of every chain that wants it, from (x', draft j) at
    // position n - 2 + j.
    seqs_.clear();
    batch_.token_ids.clear();
    batch_.logits_indices.clear();
    hidden_in_.assign(prev_hidden.begin(), prev_hidden.end());
    for (size_t c = 0; c < chains.size(); ++c) {
      const Request& r = *chains[c].request;
      seqs_.push_back({&r, r.num_tokens() - 2 + j, 1});
      batch_.token_ids.push_back(r.spec_token_ids.back());
      batch_.logits_indices.push_back(static_cast<int32_t>(c));
    }
    run_pass();
    size_t kept = 0;
    for (size_t c = 0; c < chains.size(); ++c) {
      Request& r = *chains[c].request;
      const int32_t token =
          greedy_token(std::span<const float>(logits_.data() + c * vocab_size_, vocab_size_));
      if (token == kNoToken) continue;
      r.spec_token_ids.push_back(token);
      if (chains[c].num_drafts <= j + 1) continue;
      chains[kept] = chains[c];
      std::memmove(prev_hidden.data() + kept * h, hidden_out_.data() + c * h, h * sizeof(float));
      ++kept;
    }
    chains.resize(kept);
    prev_hidden.resize(kept * h);
  }
  // A chain cut short holds pages for positions it never wrote.
  for (const Drafting& d : drafting) {
    Request& r = *d.request;
    kv_->free_tail(r.kv, r.num_tokens() +
                             std::max<int64_t>(0, static_cast<int64_t>(r.spec_token_ids.size()) - 2));
  }
  if (observer_.drafts) {
    for (const Drafting& d : drafting) {
      observer_.drafts(d.request->request_id, d.request->num_tokens(), d.request->spec_token_ids);
    }
  }
}

}  // namespace pagoda
