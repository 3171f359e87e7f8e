#include "engine/spec_decode/draft_model_proposer.h"

#include <algorithm>

#include "core/error.h"
#include "engine/sampler.h"
#include "kv/kv_cache_manager.h"

namespace pagoda {

namespace {

// The first id whose tokenizers disagree (what it decodes to, whether it is
// special), or -1 when they are the same vocabulary.
int32_t first_different_token(const Tokenizer& a, const Tokenizer& b) {
  if (a.vocab_size() != b.vocab_size()) return std::min(a.vocab_size(), b.vocab_size());
  for (int32_t id = 0; id < a.vocab_size(); ++id) {
    if (a.token_bytes(id) != b.token_bytes(id) || a.is_special(id) != b.is_special(id)) return id;
  }
  return -1;
}

}  // namespace

DraftModelProposer::DraftModelProposer(const std::string& dir, const CausalLM& target,
                                       const Tokenizer& target_tokenizer,
                                       const WeightOptions& weights, parallel::Communicator& comm)
    : comm_(comm) {
  try {
    model_ = load_model(dir, comm, weights);
  } catch (const InputError& e) {
    throw_input_error("--speculative-config: the draft model: {}", e.what());
  }
  const ModelConfig& draft = model_->config();
  const ModelConfig& config = target.config();
  if (draft.vocab_size != config.vocab_size) {
    throw_input_error(
        "--speculative-config: the draft model {} has a vocabulary of {} tokens, the target {}: "
        "a draft must share the target's tokenizer",
        dir, draft.vocab_size, config.vocab_size);
  }
  std::unique_ptr<Tokenizer> tokenizer;
  if (target.weight_bytes_per_step() > 0) {
    cost_per_draft_token_ = static_cast<double>(model_->weight_bytes_per_step()) /
                            static_cast<double>(target.weight_bytes_per_step());
  }
  try {
    tokenizer = Tokenizer::load(dir);
  } catch (const InputError& e) {
    throw_input_error("--speculative-config: the draft model's tokenizer: {}", e.what());
  }
  if (const int32_t id = first_different_token(*tokenizer, target_tokenizer); id >= 0) {
    throw_input_error(
        "--speculative-config: the draft model {}'s tokenizer differs from the target's (first "
        "at token {}: {} tokens vs {}): a draft must share the target's tokenizer",
        dir, id, tokenizer->vocab_size(), target_tokenizer.vocab_size());
  }
  if (tokenizer->bos_token_id() != target_tokenizer.bos_token_id() ||
      tokenizer->eos_token_id() != target_tokenizer.eos_token_id()) {
    throw_input_error(
        "--speculative-config: the draft model {}'s BOS/EOS tokens differ from the target's", dir);
  }
}

std::vector<LayerKVCache> DraftModelProposer::kv_cache_specs(DType kv_dtype) const {
  if (!model_->supports_kv_cache_dtype(kv_dtype)) {
    throw_input_error("--speculative-config: the draft model ({}) has no {} KV cache",
                      model_->config().architecture, dtype_name(kv_dtype));
  }
  return model_->kv_cache_specs(kv_dtype);
}

void DraftModelProposer::bind_kv_cache(const KVCachePlan& plan, KVCacheMemory& memory,
                                       int32_t first_layer, KVCacheManager& kv) {
  runner_ = std::make_unique<ModelRunner>(*model_, plan, memory, first_layer, comm_);
  for (const KVCacheGroup& g : plan.groups) feeds_outputs_ = feeds_outputs_ || g.spec.sliding_window > 0;
  kv_ = &kv;
}

void DraftModelProposer::propose(const ProposeStep& step) {
  PAGODA_CHECK(runner_ != nullptr, "the draft model's caches are not bound");
  seqs_.clear();
  drafting_.clear();
  int32_t max_drafts = 0;
  for (const ProposalRequest& p : step.requests) {
    Request& r = *p.request;
    r.spec_token_ids.clear();
    const int64_t n = r.num_tokens();
    // Pages of an earlier chain past the tokens (a step that verified none
    // of them, then a request that drafts no more, would keep them).
    kv_->free_tail(r.kv, n);
    int32_t k = p.num_drafts;
    // Pages up to the last draft fed (draft k is only predicted); when the
    // pool is short, one draft (pages up to the last token), else none.
    // Sliding groups release only what no query from the draft's own
    // catch-up start on reads (it may be behind the target).
    const int64_t start = r.num_proposer_computed_tokens;
    const int64_t keep_from = std::min(start, r.num_computed_tokens);
    if (k > 0 && !kv_->allocate(r.kv, keep_from, n + k - 1)) {
      k = kv_->allocate(r.kv, keep_from, n) ? 1 : 0;
    }
    // Drafting: up to the last token; else the prompt as far as the target
    // computed it, or every computed token for a draft with sliding
    // windows (header).
    const int64_t computed =
        feeds_outputs_ ? r.num_computed_tokens
                       : std::min<int64_t>(r.num_computed_tokens,
                                           static_cast<int64_t>(r.prompt_ids.size()));
    const int64_t end = k > 0 ? n : std::max(start, computed);
    PAGODA_CHECK(start <= end, "request {}: the draft computed {} positions, {} wanted",
                 r.request_id, start, end);
    if (start == end) continue;  // caught up (a prefix-cache hit, a short chunk)
    seqs_.push_back({&r, start, end, k > 0});
    r.num_proposer_computed_tokens = end;
    if (k > 0) {
      drafting_.push_back({&r, n, k});
      max_drafts = std::max(max_drafts, k);
    }
  }
  const int64_t vocab = runner_->vocab_size();
  // Appends draft j of each request still drafting from the pass's rows;
  // one whose logits have no finite value stops there.
  auto take_drafts = [&](int32_t j) {
    size_t row = 0;
    for (Drafting& d : drafting_) {
      if (d.num_drafts <= j) continue;
      const int32_t token =
          greedy_token(std::span<const float>(runner_->logits_row(row++), vocab));
      if (token == kNoToken) {
        d.num_drafts = j;
        continue;
      }
      d.request->spec_token_ids.push_back(token);
    }
  };
  if (seqs_.empty()) return;
  runner_->execute(seqs_);
  take_drafts(0);
  for (int32_t j = 1; j < max_drafts; ++j) {
    // Draft j (at position first_position + j - 1) in, draft j + 1 out.
    seqs_.clear();
    for (const Drafting& d : drafting_) {
      if (d.num_drafts <= j) continue;
      const int64_t pos = d.first_position + j - 1;
      seqs_.push_back({d.request, pos, pos + 1, true});
      d.request->num_proposer_computed_tokens = pos + 1;
    }
    if (seqs_.empty()) break;
    runner_->execute(seqs_);
    take_drafts(j);
  }
  // A request that stopped early holds pages for drafts it never fed; the
  // positions it fed (num_proposer_computed_tokens) keep theirs.
  for (const Drafting& d : drafting_) {
    kv_->free_tail(d.request->kv, d.request->num_proposer_computed_tokens);
  }
}

}  // namespace pagoda
