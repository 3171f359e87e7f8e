#include "engine/spec_decode/mtp_proposer.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace pagoda {

namespace {

int32_t argmax(const float* row, int64_t n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);
}

}  // namespace

MtpProposer::MtpProposer(CausalLM& model, ModelRunner& runner, KVCacheManager& kv)
    : model_(model),
      runner_(runner),
      kv_(kv),
      hidden_size_(model.config().hidden_size),
      vocab_size_(runner.vocab_size()) {
  batch_.kv_groups.resize(kv_.groups().size());
  for (size_t g = 0; g < kv_.groups().size(); ++g) {
    batch_.kv_groups[g].block_size = kv_.groups()[g].block_size;
  }
}

void MtpProposer::run_pass() {
  BatchMetadata& b = batch_;
  b.positions.clear();
  b.query_start_loc.assign(1, 0);
  b.seq_lens.clear();
  for (const Seq& s : seqs_) {
    for (int64_t p = s.first_position; p < s.first_position + s.count; ++p) {
      b.positions.push_back(static_cast<int32_t>(p));
    }
    b.query_start_loc.push_back(static_cast<int32_t>(b.positions.size()));
    b.seq_lens.push_back(static_cast<int32_t>(s.first_position + s.count));
  }
  PAGODA_CHECK(b.positions.size() == b.token_ids.size() &&
                   hidden_in_.size() == b.token_ids.size() * static_cast<size_t>(hidden_size_),
               "MTP pass: {} positions, {} tokens", b.positions.size(), b.token_ids.size());
  // Each sequence's own block-table row (a copy of its pages; the layer
  // shares the stack's groups, so these are the main model's pages).
  for (size_t g = 0; g < b.kv_groups.size(); ++g) {
    KVGroupMetadata& gm = b.kv_groups[g];
    const KVCacheSpec& spec = kv_.groups()[g].spec;
    size_t stride = 1;
    for (const Seq& s : seqs_) stride = std::max(stride, s.request->kv.block_tables[g].size());
    gm.max_blocks_per_seq = static_cast<int32_t>(stride);
    gm.block_tables.assign(seqs_.size() * stride, 0);
    gm.block_table_rows.clear();
    gm.slot_mapping.clear();
    for (size_t i = 0; i < seqs_.size(); ++i) {
      const Seq& s = seqs_[i];
      const std::vector<int32_t>& table = s.request->kv.block_tables[g];
      for (size_t j = 0; j < table.size(); ++j) gm.block_tables[i * stride + j] = std::max(table[j], 0);
      for (int64_t p = s.first_position; p < s.first_position + s.count; ++p) {
        gm.slot_mapping.push_back(spec.slot_of_position(table, p, gm.block_size));
      }
    }
  }
  const size_t rows = b.logits_indices.size();
  logits_.resize(rows * static_cast<size_t>(vocab_size_));
  hidden_out_.resize(rows * static_cast<size_t>(hidden_size_));
  runner_.execute_mtp(b, hidden_in_.data(), logits_.data(), hidden_out_.data());
}

void MtpProposer::run_after_step(const SchedulerOutput& sched, const StepLogits& rows,
                                 std::span<const std::vector<SampledToken>> sampled,
                                 std::span<const int32_t> num_accepted) {
  const BatchMetadata& step = runner_.last_batch();
  const float* hidden = model_.mtp_hidden_states();
  PAGODA_CHECK(hidden != nullptr, "the model keeps no hidden states for MTP");
  std::vector<int32_t> sampling_row(sched.scheduled.size(), -1);
  for (size_t i = 0; i < rows.sampling_requests.size(); ++i) {
    sampling_row[static_cast<size_t>(rows.sampling_requests[i])] = static_cast<int32_t>(i);
  }
  seqs_.clear();
  batch_.token_ids.clear();
  batch_.logits_indices.clear();
  hidden_in_.clear();
  last_row_.clear();
  const auto h = static_cast<size_t>(hidden_size_);
  for (size_t i = 0; i < sched.scheduled.size(); ++i) {
    const ScheduledRequest& s = sched.scheduled[i];
    const Request& r = *s.request;
    const int32_t row0 = step.query_start_loc[i];
    const int64_t start = step.positions[static_cast<size_t>(row0)];
    const int64_t known = r.num_tokens();  // this step's tokens are not appended yet
    // Positions whose hidden state stands: the real tokens, plus the
    // accepted drafts of a verifying request.
    int64_t count = s.num_new_tokens - s.num_spec_tokens;
    const int32_t si = sampling_row[i];
    if (si >= 0) count += num_accepted[static_cast<size_t>(si)];
    int64_t n = 0;
    for (; n < count; ++n) {  // position start + n pairs with the token after it
      const int64_t next = start + n + 1;
      int32_t token = 0;
      if (next < known) {
        token = r.token_at(next);
      } else {
        token = sampled[static_cast<size_t>(si)][static_cast<size_t>(next - known)].token;
        if (token == kNoToken) break;  // the request stops (sampler.h)
      }
      batch_.token_ids.push_back(token);
      const float* row = hidden + static_cast<size_t>(row0 + n) * h;
      hidden_in_.insert(hidden_in_.end(), row, row + h);
    }
    if (n == 0) continue;
    const auto end = static_cast<int32_t>(batch_.token_ids.size());
    if (observer_.logits) {
      for (int32_t t = end - static_cast<int32_t>(n); t < end; ++t) batch_.logits_indices.push_back(t);
    } else if (si >= 0 && n == count) {
      batch_.logits_indices.push_back(end - 1);
    }
    if (si >= 0 && n == count) {
      last_row_[&r] = static_cast<int32_t>(batch_.logits_indices.size()) - 1;
    }
    seqs_.push_back({&r, start, n});
  }
  if (seqs_.empty()) return;
  run_pass();
  if (observer_.logits) {
    size_t row = 0;
    for (const Seq& s : seqs_) {
      for (int64_t p = s.first_position; p < s.first_position + s.count; ++p, ++row) {
        observer_.logits(s.request->request_id, p, logits_.data() + row * vocab_size_,
                         vocab_size_);
      }
    }
  }
  first_logits_.swap(logits_);
  first_hidden_.swap(hidden_out_);
}

void MtpProposer::propose(std::span<const Draft> drafts) {
  const auto h = static_cast<size_t>(hidden_size_);
  struct Chain {
    Request* request;
    int32_t max_drafts;
  };
  std::vector<Chain> chains;
  std::vector<float> prev_hidden;  // [chains, hidden]: the layer's output at the last position
  for (const Draft& d : drafts) {
    Request& r = *d.request;
    r.spec_token_ids.clear();
    // Pages past the request's tokens held a previous chain's entries.
    const int64_t n = r.num_tokens();
    kv_.free_tail(r.kv, n);
    const auto it = last_row_.find(&r);
    if (d.max_drafts <= 0 || it == last_row_.end()) continue;
    const auto row = static_cast<size_t>(it->second);
    r.spec_token_ids.push_back(argmax(first_logits_.data() + row * vocab_size_, vocab_size_));
    int32_t max_drafts = d.max_drafts;
    // The chain writes the layer's entries at positions n - 1 ...
    // n + max_drafts - 3, pages the next step's verification needs anyway;
    // with none to spare, one draft.
    if (max_drafts > 1 && !kv_.allocate(r.kv, r.num_computed_tokens, n + max_drafts - 2)) {
      max_drafts = 1;
    }
    if (max_drafts > 1) {
      chains.push_back({&r, max_drafts});
      const float* x = first_hidden_.data() + row * h;
      prev_hidden.insert(prev_hidden.end(), x, x + h);
    }
  }
  for (int32_t j = 1; !chains.empty(); ++j) {
    // Draft j + 1 of every chain that wants it, from (x', draft j) at
    // position n - 2 + j.
    seqs_.clear();
    batch_.token_ids.clear();
    batch_.logits_indices.clear();
    hidden_in_.clear();
    for (size_t c = 0; c < chains.size(); ++c) {
      const Request& r = *chains[c].request;
      seqs_.push_back({&r, r.num_tokens() - 2 + j, 1});
      batch_.token_ids.push_back(r.spec_token_ids.back());
      batch_.logits_indices.push_back(static_cast<int32_t>(c));
      hidden_in_.insert(hidden_in_.end(), prev_hidden.begin() + static_cast<std::ptrdiff_t>(c * h),
                        prev_hidden.begin() + static_cast<std::ptrdiff_t>((c + 1) * h));
    }
    run_pass();
    size_t kept = 0;
    for (size_t c = 0; c < chains.size(); ++c) {
      chains[c].request->spec_token_ids.push_back(argmax(logits_.data() + c * vocab_size_, vocab_size_));
      if (chains[c].max_drafts <= j + 1) continue;
      chains[kept] = chains[c];
      std::memmove(prev_hidden.data() + kept * h, hidden_out_.data() + c * h, h * sizeof(float));
      ++kept;
    }
    chains.resize(kept);
    prev_hidden.resize(kept * h);
  }
  if (observer_.drafts) {
    for (const Draft& d : drafts) {
      observer_.drafts(d.request->request_id, d.request->num_tokens(), d.request->spec_token_ids);
    }
  }
}

}  // namespace pagoda
