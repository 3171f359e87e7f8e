// Speculative decoding counters since start, over all requests (vLLM's
// SpecDecodingStats; the server's /metrics and `bench` report them).
#pragma once

#include <cstdint>
#include <vector>

namespace pagoda {

struct SpecDecodeStats {
  int64_t num_drafts = 0;           // verify steps of a request with >= 1 draft token
  int64_t num_draft_tokens = 0;     // draft tokens verified
  int64_t num_accepted_tokens = 0;  // of those, accepted
  // [i]: drafts whose token at position i was accepted (position i is
  // reached only when 0..i-1 were accepted).
  std::vector<int64_t> num_accepted_tokens_per_pos;

  void record(int32_t num_draft, int32_t num_accepted) {
    ++num_drafts;
    num_draft_tokens += num_draft;
    num_accepted_tokens += num_accepted;
    if (num_accepted_tokens_per_pos.size() < static_cast<size_t>(num_draft))
      num_accepted_tokens_per_pos.resize(static_cast<size_t>(num_draft), 0);
    for (int32_t i = 0; i < num_accepted; ++i) ++num_accepted_tokens_per_pos[static_cast<size_t>(i)];
  }
  // Accepted / drafted tokens (0 before any draft).
  double acceptance_rate() const {
    return num_draft_tokens ? static_cast<double>(num_accepted_tokens) / num_draft_tokens : 0.0;
  }
  // Tokens a verify step emits on average: 1 + accepted drafts (vLLM's
  // "mean acceptance length").
  double mean_acceptance_length() const {
    return num_drafts ? 1.0 + static_cast<double>(num_accepted_tokens) / num_drafts : 0.0;
  }
};

}  // namespace pagoda
