#include "engine/spec_decode/ngram_proposer.h"

#include <algorithm>

namespace pagoda {

namespace {

// The context prompt + output without copying it.
struct Tokens {
  std::span<const int32_t> prompt, output;
  int64_t size() const { return static_cast<int64_t>(prompt.size() + output.size()); }
  int32_t operator[](int64_t i) const {
    const auto p = static_cast<int64_t>(prompt.size());
    return i < p ? prompt[static_cast<size_t>(i)] : output[static_cast<size_t>(i - p)];
  }
};

// The hash of the n tokens ending at `end`, built backwards one token at a
// time (hash n from hash n - 1), so all n for one end cost O(max_n).
uint64_t extend(uint64_t h, int32_t token) {
  uint64_t x = h + static_cast<uint32_t>(token) + 0x9E3779B97F4A7C15ull;  // splitmix64's finaliser
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Lengths indexed per position, at most (memory: that many table entries
// per token); longer n of a wide [min_n, max_n] are found by the scan.
constexpr int32_t kMaxIndexedLengths = 8;

// The latest earlier occurrence of the context's last n tokens, by a
// backwards scan: the start i (i + n <= len - 1, so a token follows), or -1.
int64_t scan_latest(const auto& t, int64_t len, int64_t n) {
  for (int64_t i = len - n - 1; i >= 0; --i) {
    bool match = true;
    for (int64_t j = 0; j < n && match; ++j) match = t[i + j] == t[len - n + j];
    if (match) return i;
  }
  return -1;
}

// Appends k tokens continuing the context after position `from` (the
// first token after a match); past the end it continues into the draft.
void copy_draft(const Tokens& t, int64_t from, int32_t k, std::vector<int32_t>* draft) {
  const int64_t len = t.size();
  for (int64_t i = 0; i < k; ++i) {
    const int64_t src = from + i;
    draft->push_back(src < len ? t[src] : (*draft)[static_cast<size_t>(src - len)]);
  }
}

}  // namespace

void NgramProposer::propose(const ProposeStep& step) {
  for (const ProposalRequest& p : step.requests) {
    Request& r = *p.request;
    r.spec_token_ids.clear();
    // A request that does not draft this step is indexed when it next does
    // (the index catches up from where it stopped).
    if (p.num_drafts <= 0) continue;
    lookup(r.prompt_ids, r.output_ids, p.num_drafts, &r.ngram_index, &r.spec_token_ids);
  }
}

void NgramProposer::lookup(std::span<const int32_t> prompt, std::span<const int32_t> output,
                           int32_t k, NgramIndex* index, std::vector<int32_t>* draft) const {
  draft->clear();
  const Tokens t{prompt, output};
  const int64_t len = t.size();
  if (index->indexed > len) *index = NgramIndex{{}, 0, index->hash_mask};  // not this context's index
  // Index the n-grams ending before the last token (the suffixes looked up
  // below must match strictly earlier occurrences, with a token after).
  const int64_t indexed_max = std::min(max_n_, min_n_ + kMaxIndexedLengths - 1);
  for (int64_t end = index->indexed; end < len - 1; ++end) {
    uint64_t h = 0;
    for (int64_t n = 1; n <= indexed_max && end - n + 1 >= 0; ++n) {
      h = extend(h, t[end - n + 1]);
      if (n >= min_n_) index->latest_end[h & index->hash_mask] = end;
    }
  }
  index->indexed = std::max<int64_t>(index->indexed, len - 1);
  if (k <= 0) return;
  const int64_t top = std::min<int64_t>(max_n_, len - 1);
  for (int64_t n = top; n > indexed_max; --n) {
    const int64_t i = scan_latest(t, len, n);
    if (i >= 0) {
      copy_draft(t, i + n, k, draft);
      return;
    }
  }
  uint64_t hash[kMaxIndexedLengths + 1];  // hash[n - min_n]: the last n tokens'
  uint64_t h = 0;
  for (int64_t n = 1; n <= std::min(top, indexed_max); ++n) {
    h = extend(h, t[len - n]);
    if (n >= min_n_) hash[n - min_n_] = h;
  }
  for (int64_t n = std::min(top, indexed_max); n >= min_n_; --n) {
    const auto it = index->latest_end.find(hash[n - min_n_] & index->hash_mask);
    if (it == index->latest_end.end()) continue;
    const int64_t end = it->second;
    bool same = true;
    for (int64_t j = 0; j < n && same; ++j) same = t[end - j] == t[len - 1 - j];
    if (same) {
      copy_draft(t, end + 1, k, draft);
      return;
    }
    // A collision: this n's latest occurrence, if any, by a scan.
    if (const int64_t i = scan_latest(t, len, n); i >= 0) {
      copy_draft(t, i + n, k, draft);
      return;
    }
  }
}

void NgramProposer::propose_by_scan(std::span<const int32_t> context, int32_t k,
                                    std::vector<int32_t>* draft) const {
  draft->clear();
  const auto len = static_cast<int64_t>(context.size());
  if (k <= 0) return;
  for (int64_t n = std::min<int64_t>(max_n_, len - 1); n >= min_n_; --n) {
    const auto suffix = context.subspan(static_cast<size_t>(len - n));
    // The latest earlier start i (i + n <= len - 1, so a token follows).
    for (int64_t i = len - n - 1; i >= 0; --i) {
      if (!std::equal(suffix.begin(), suffix.end(), context.begin() + i)) continue;
      copy_draft(Tokens{context, {}}, i + n, k, draft);
      return;
    }
  }
}

}  // namespace pagoda
