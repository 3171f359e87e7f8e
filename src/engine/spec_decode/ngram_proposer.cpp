#include "engine/spec_decode/ngram_proposer.h"

#include <algorithm>

namespace pagoda {

void NgramProposer::propose(const ProposeStep& step) {
  for (const ProposalRequest& p : step.requests) {
    Request& r = *p.request;
    r.spec_token_ids.clear();
    if (p.num_drafts <= 0) continue;
    context_.assign(r.prompt_ids.begin(), r.prompt_ids.end());
    context_.insert(context_.end(), r.output_ids.begin(), r.output_ids.end());
    lookup(context_, p.num_drafts, &r.spec_token_ids);
  }
}

void NgramProposer::lookup(std::span<const int32_t> context, int32_t k,
                           std::vector<int32_t>* draft) const {
  draft->clear();
  const auto len = static_cast<int64_t>(context.size());
  if (k <= 0) return;
  for (int64_t n = std::min<int64_t>(max_n_, len - 1); n >= min_n_; --n) {
    const auto suffix = context.subspan(static_cast<size_t>(len - n));
    // The latest earlier start i (i + n <= len - 1, so a token follows).
    for (int64_t i = len - n - 1; i >= 0; --i) {
      if (!std::equal(suffix.begin(), suffix.end(), context.begin() + i)) continue;
      for (int64_t t = 0; t < k; ++t) {
        const int64_t src = i + n + t;
        draft->push_back(src < len ? context[static_cast<size_t>(src)]
                                   : (*draft)[static_cast<size_t>(src - len)]);
      }
      return;
    }
  }
}

}  // namespace pagoda
