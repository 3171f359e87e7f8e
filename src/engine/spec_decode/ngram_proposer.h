// The n-gram (prompt lookup) proposer: drafts the tokens that followed the
// latest earlier occurrence of the context's last n tokens, trying n from
// prompt_lookup_max down to prompt_lookup_min (vLLM's "ngram" method).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/spec_decode/proposer.h"

namespace pagoda {

class NgramProposer : public Proposer {
 public:
  NgramProposer(int32_t min_n, int32_t max_n) : min_n_(min_n), max_n_(max_n) {}

  // Each request's lookup over its prompt + output.
  void propose(const ProposeStep& step) override;

  // Up to `k` draft tokens continuing `context` (prompt + output so far);
  // none when no suffix of at least min_n tokens occurred before. A match
  // close to the end continues into the draft itself (the text after it is
  // the text after the suffix), so a loop of period p < k drafts k tokens.
  // One scan of the context per n tried: O(context x max_n) worst case,
  // microseconds at a few thousand tokens next to a decode step's
  // milliseconds.
  void lookup(std::span<const int32_t> context, int32_t k, std::vector<int32_t>* draft) const;

 private:
  int32_t min_n_, max_n_;
  std::vector<int32_t> context_;  // scratch: prompt + output
};

}  // namespace pagoda
