#include "engine/model_runner.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/error.h"

namespace pagoda {

namespace {

// Step messages from rank 0 to the workers: a header {kind, payload bytes}
// then the payload, the batch's vectors each as {int64 length, elements}.
enum MessageKind : int64_t { kStep = 1, kShutdown = 2 };

template <typename T>
void put(std::vector<uint8_t>& buf, const std::vector<T>& v) {
  const int64_t n = static_cast<int64_t>(v.size());
  const size_t at = buf.size();
  buf.resize(at + sizeof(n) + v.size() * sizeof(T));
  std::memcpy(buf.data() + at, &n, sizeof(n));
  if (n > 0) std::memcpy(buf.data() + at + sizeof(n), v.data(), v.size() * sizeof(T));
}

template <typename T>
void get(const std::vector<uint8_t>& buf, size_t& at, std::vector<T>& v) {
  int64_t n = 0;
  PAGODA_CHECK(at + sizeof(n) <= buf.size(), "truncated step message");
  std::memcpy(&n, buf.data() + at, sizeof(n));
  at += sizeof(n);
  PAGODA_CHECK(n >= 0 && at + n * sizeof(T) <= buf.size(), "truncated step message");
  v.resize(static_cast<size_t>(n));
  if (n > 0) std::memcpy(v.data(), buf.data() + at, static_cast<size_t>(n) * sizeof(T));
  at += static_cast<size_t>(n) * sizeof(T);
}

void serialize(const BatchMetadata& b, std::vector<uint8_t>& buf) {
  buf.clear();
  put(buf, b.token_ids);
  put(buf, b.positions);
  put(buf, b.query_start_loc);
  put(buf, b.seq_lens);
  put(buf, b.logits_indices);
  for (const KVGroupMetadata& g : b.kv_groups) {
    put(buf, g.slot_mapping);
    put(buf, g.block_tables);
    put(buf, g.block_table_rows);
    put(buf, std::vector<int32_t>{g.max_blocks_per_seq});
  }
}

void deserialize(const std::vector<uint8_t>& buf, BatchMetadata& b) {
  size_t at = 0;
  get(buf, at, b.token_ids);
  get(buf, at, b.positions);
  get(buf, at, b.query_start_loc);
  get(buf, at, b.seq_lens);
  get(buf, at, b.logits_indices);
  std::vector<int32_t> max_blocks;
  for (KVGroupMetadata& g : b.kv_groups) {
    get(buf, at, g.slot_mapping);
    get(buf, at, g.block_tables);
    get(buf, at, g.block_table_rows);
    get(buf, at, max_blocks);
    PAGODA_CHECK(max_blocks.size() == 1, "bad step message");
    g.max_blocks_per_seq = max_blocks[0];
  }
  PAGODA_CHECK(at == buf.size(), "step message has {} extra bytes", buf.size() - at);
}

}  // namespace

namespace {

// The layers [first, first + the model's layer count) of a view.
KVCacheView layers_of(const KVCacheView& all, const CausalLM& model, int32_t first) {
  int32_t count = 0;
  for (const LayerKVCache& c : model.kv_cache_specs(all.dtype)) count = std::max(count, c.layer + 1);
  PAGODA_CHECK(first >= 0 && first + count <= static_cast<int32_t>(all.layers.size()),
               "layers [{}, {}) of a plan of {}", first, first + count, all.layers.size());
  KVCacheView v;
  v.block_size = all.block_size;
  v.dtype = all.dtype;
  v.layers.assign(all.layers.begin() + first, all.layers.begin() + first + count);
  return v;
}

}  // namespace

ModelRunner::ModelRunner(CausalLM& model, const KVCachePlan& plan,
                         const std::vector<int64_t>& num_blocks, DType kv_dtype,
                         parallel::Communicator& comm)
    : model_(model),
      comm_(comm),
      plan_(plan),
      vocab_size_(model.config().vocab_size),
      owned_memory_(std::make_unique<KVCacheMemory>(plan_, num_blocks, kv_dtype)),
      memory_(owned_memory_.get()),
      view_(layers_of(memory_->view(), model, 0)) {
  batch_.kv_groups.resize(plan_.groups.size());
  for (size_t g = 0; g < plan_.groups.size(); ++g) {
    batch_.kv_groups[g].block_size = plan_.groups[g].block_size;
  }
}

ModelRunner::ModelRunner(CausalLM& model, const KVCachePlan& plan, KVCacheMemory& memory,
                         int32_t first_layer, parallel::Communicator& comm)
    : model_(model),
      comm_(comm),
      plan_(plan),
      vocab_size_(model.config().vocab_size),
      memory_(&memory),
      view_(layers_of(memory.view(), model, first_layer)) {
  batch_.kv_groups.resize(plan_.groups.size());
  for (size_t g = 0; g < plan_.groups.size(); ++g) {
    batch_.kv_groups[g].block_size = plan_.groups[g].block_size;
  }
}

void ModelRunner::update_block_tables(std::span<const KVRequestState* const> seqs) {
  const size_t num_groups = plan_.groups.size();
  // Rows of requests not scheduled this step go back (a request that runs
  // again later gets a fresh row and a full copy).
  std::vector<char> keep(table_rows_.size(), 0);
  std::vector<int32_t> row_of(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) {
    const KVRequestState* kv = seqs[i];
    const auto it = row_index_.find(kv);
    int32_t row = -1;
    if (it != row_index_.end() && table_rows_[it->second].generation == kv->generation) {
      row = it->second;
    } else {
      if (it != row_index_.end()) {  // a new admission at this address: start over
        table_rows_[it->second].owner = nullptr;
        row_index_.erase(it);
      }
      row = static_cast<int32_t>(table_rows_.size());
      for (int32_t r = 0; r < static_cast<int32_t>(table_rows_.size()); ++r) {
        if (table_rows_[r].owner == nullptr) {
          row = r;
          break;
        }
      }
      if (row == static_cast<int32_t>(table_rows_.size())) {
        table_rows_.emplace_back();
        keep.push_back(0);
      }
      table_rows_[row] = {kv, kv->generation, std::vector<size_t>(num_groups, 0)};
      row_index_[kv] = row;
    }
    keep[row] = 1;
    row_of[i] = row;
  }
  for (size_t r = 0; r < table_rows_.size(); ++r) {
    if (!keep[r] && table_rows_[r].owner != nullptr) {
      const auto it = row_index_.find(table_rows_[r].owner);
      if (it != row_index_.end() && it->second == static_cast<int32_t>(r)) row_index_.erase(it);
      table_rows_[r].owner = nullptr;
    }
  }
  const auto num_rows = static_cast<int64_t>(table_rows_.size());
  for (size_t g = 0; g < num_groups; ++g) {
    KVGroupMetadata& gm = batch_.kv_groups[g];
    int32_t needed = 1;
    for (const KVRequestState* kv : seqs) {
      needed = std::max(needed, static_cast<int32_t>(kv->block_tables[g].size()));
    }
    const int32_t stride = needed > gm.max_blocks_per_seq
                               ? std::max(needed, 2 * gm.max_blocks_per_seq)
                               : gm.max_blocks_per_seq;
    if (stride != gm.max_blocks_per_seq ||
        static_cast<int64_t>(gm.block_tables.size()) < num_rows * stride) {
      // A longer sequence (rows widened, doubling so this stays rare) or
      // more rows: carry over what every live row holds.
      std::vector<int32_t> wider(num_rows * stride, 0);
      for (int64_t r = 0; r < num_rows; ++r) {
        if (table_rows_[r].owner == nullptr) continue;
        std::copy_n(gm.block_tables.begin() + r * gm.max_blocks_per_seq,
                    table_rows_[r].copied[g], wider.begin() + r * stride);
      }
      gm.block_tables = std::move(wider);
      gm.max_blocks_per_seq = stride;
    }
    gm.block_table_rows.assign(row_of.begin(), row_of.end());
    // Append each request's new blocks. Released (-1) entries of sliding
    // groups are never read; 0 keeps them in range (an entry copied before
    // its block was released keeps the old id: never read either).
    for (size_t i = 0; i < seqs.size(); ++i) {
      const std::vector<int32_t>& table = seqs[i]->block_tables[g];
      size_t& copied = table_rows_[row_of[i]].copied[g];
      int32_t* row = gm.block_tables.data() + int64_t{row_of[i]} * gm.max_blocks_per_seq;
      for (size_t j = copied; j < table.size(); ++j) row[j] = std::max(table[j], 0);
      copied = table.size();
    }
  }
}

void ModelRunner::begin_batch() {
  BatchMetadata& b = batch_;
  b.token_ids.clear();
  b.positions.clear();
  b.query_start_loc.assign(1, 0);
  b.seq_lens.clear();
  b.logits_indices.clear();
  for (KVGroupMetadata& gm : b.kv_groups) gm.slot_mapping.clear();
}

void append_sequence(BatchMetadata& b, const std::vector<KVCacheGroup>& groups,
                     const std::vector<std::vector<int32_t>>& block_tables, int64_t start,
                     int64_t end) {
  for (int64_t pos = start; pos < end; ++pos) b.positions.push_back(static_cast<int32_t>(pos));
  for (size_t g = 0; g < groups.size(); ++g) {
    KVGroupMetadata& gm = b.kv_groups[g];
    const KVCacheSpec& spec = groups[g].spec;
    for (int64_t pos = start; pos < end; ++pos) {
      gm.slot_mapping.push_back(spec.slot_of_position(block_tables[g], pos, gm.block_size));
    }
  }
  b.query_start_loc.push_back(static_cast<int32_t>(b.positions.size()));
  b.seq_lens.push_back(static_cast<int32_t>(end));
}

void ModelRunner::add_sequence(const Request& r, int64_t start, int64_t end) {
  for (int64_t pos = start; pos < end; ++pos) batch_.token_ids.push_back(r.token_at(pos));
  append_sequence(batch_, plan_.groups, r.kv.block_tables, start, end);
}

void ModelRunner::forward() {
  logits_.resize(batch_.logits_indices.size() * vocab_size_);
  in_step_ = true;
  if (comm_.size() > 1) broadcast_step(kStep);
  const auto forward_start = std::chrono::steady_clock::now();
  model_.forward(batch_, view_, logits_.data());
  forward_seconds_ +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - forward_start).count();
  in_step_ = false;
}

void ModelRunner::execute(const SchedulerOutput& out, StepLogits* rows) {
  BatchMetadata& b = batch_;
  begin_batch();
  rows->clear();
  seq_kv_.clear();
  for (const ScheduledRequest& s : out.scheduled) seq_kv_.push_back(&s.request->kv);
  update_block_tables(seq_kv_);
  for (size_t i = 0; i < out.scheduled.size(); ++i) {
    const Request& r = *out.scheduled[i].request;
    const int64_t start = r.num_computed_tokens, end = start + out.scheduled[i].num_new_tokens;
    add_sequence(r, start, end);
    // One past this request's last token in the flattened batch: position
    // pos is token batch_end - (end - pos).
    const auto batch_end = static_cast<int32_t>(b.token_ids.size());
    if (r.scoring_prompt()) {
      // Entry e comes from position e; entries are filled in order and a
      // prefix-cache hit never skips positions (Scheduler), so this chunk
      // starts at or before the first unfilled entry.
      const auto filled = static_cast<int64_t>(r.prompt_logprobs->size());
      PAGODA_CHECK(start <= filled, "request {} computes from {} with prompt logprobs up to {}",
                   r.request_id, start, filled);
      // Positions [filled, to) still lack entries; the last prompt position
      // predicts the first output token, which its sampling row handles.
      const int64_t from = filled;
      const int64_t to = std::min<int64_t>(end, static_cast<int64_t>(r.prompt_ids.size()) - 1);
      if (from < to) {
        rows->prompt_rows.push_back({static_cast<int32_t>(i),
                                     static_cast<int32_t>(b.logits_indices.size()), from,
                                     to - from});
        for (int64_t pos = from; pos < to; ++pos) {
          b.logits_indices.push_back(static_cast<int32_t>(batch_end - (end - pos)));
        }
      }
    }
    // Prompt (or recompute) done: this row samples; drafts past the known
    // tokens add one row each.
    if (end >= r.num_tokens()) {
      rows->sampling_requests.push_back(static_cast<int32_t>(i));
      rows->sampling_rows.push_back(static_cast<int32_t>(b.logits_indices.size()));
      for (int64_t pos = r.num_tokens() - 1; pos < end; ++pos) {
        b.logits_indices.push_back(static_cast<int32_t>(batch_end - (end - pos)));
      }
    }
  }
  forward();
}

void ModelRunner::execute(std::span<const ProposerSequence> seqs) {
  PAGODA_CHECK(comm_.size() == 1, "a proposer pass under tensor parallelism");
  begin_batch();
  seq_kv_.clear();
  for (const ProposerSequence& s : seqs) seq_kv_.push_back(&s.request->kv);
  update_block_tables(seq_kv_);
  for (const ProposerSequence& s : seqs) {
    PAGODA_CHECK(s.start < s.end, "request {}: an empty proposer sequence", s.request->request_id);
    add_sequence(*s.request, s.start, s.end);
    if (s.logits) batch_.logits_indices.push_back(static_cast<int32_t>(batch_.token_ids.size()) - 1);
  }
  forward();
}

void ModelRunner::broadcast_step(int64_t kind) {
  if (kind == kStep) {
    serialize(batch_, message_);
  } else {
    message_.clear();
  }
  int64_t header[2] = {kind, static_cast<int64_t>(message_.size())};
  comm_.broadcast(header, sizeof(header), 0);
  if (!message_.empty()) comm_.broadcast(message_.data(), header[1], 0);
}

int64_t ModelRunner::serve_worker() {
  PAGODA_CHECK(comm_.rank() != 0, "serve_worker on rank 0");
  int64_t steps = 0;
  for (;;) {
    int64_t header[2] = {0, 0};
    comm_.broadcast(header, sizeof(header), 0);
    if (header[0] == kShutdown) return steps;
    PAGODA_CHECK(header[0] == kStep && header[1] >= 0, "bad step header {}", header[0]);
    message_.resize(static_cast<size_t>(header[1]));
    if (header[1] > 0) comm_.broadcast(message_.data(), header[1], 0);
    deserialize(message_, batch_);
    model_.forward(batch_, view_, nullptr);
    ++steps;
  }
}

void ModelRunner::shutdown_workers() {
  if (comm_.size() == 1 || comm_.rank() != 0 || workers_stopped_ || in_step_) return;
  workers_stopped_ = true;
  broadcast_step(kShutdown);
}

}  // namespace pagoda
