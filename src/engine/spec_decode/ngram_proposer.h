// The n-gram (prompt lookup) proposer: drafts the tokens that followed the
// latest earlier occurrence of the context's last n tokens, trying n from
// prompt_lookup_max down to prompt_lookup_min (vLLM's "ngram" method).
//
// Each request keeps an NgramIndex: every n-gram (min_n <= n <= max_n) of
// its tokens, by hash, with the position where its latest occurrence ends.
// A step adds the n-grams ending at the tokens that arrived since the last
// one and looks the current suffixes up, so its cost does not depend on
// the context's length (the first step indexes the prompt once). Up to 8
// lengths from min_n are indexed (8 table entries per token); a wider
// range finds its longer n by scanning, as before. Matches
// are checked token by token, so a hash collision costs a scan, never a
// wrong draft: the drafts are exactly propose_by_scan's.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/spec_decode/ngram_index.h"
#include "engine/spec_decode/proposer.h"

namespace pagoda {

class NgramProposer : public Proposer {
 public:
  NgramProposer(int32_t min_n, int32_t max_n) : min_n_(min_n), max_n_(max_n) {}

  // Each drafting request's lookup over its prompt + output, with the
  // request's own index (Request::ngram_index).
  void propose(const ProposeStep& step) override;

  // Up to `k` draft tokens continuing the context `prompt` + `output` (the
  // request's tokens so far; it only grows between calls with the same
  // index); none when no suffix of at least min_n tokens occurred before.
  // A match close to the end continues into the draft itself (the text
  // after it is the text after the suffix), so a loop of period p < k
  // drafts k tokens.
  void lookup(std::span<const int32_t> prompt, std::span<const int32_t> output, int32_t k,
              NgramIndex* index, std::vector<int32_t>* draft) const;

  // The same drafts by scanning the whole context backwards once per n
  // (O(context x max_n) per step): the reference the index is tested and
  // benchmarked against.
  void propose_by_scan(std::span<const int32_t> context, int32_t k, std::vector<int32_t>* draft) const;

 private:
  int32_t min_n_, max_n_;
};

}  // namespace pagoda
