// A request's index for the n-gram proposer (ngram_proposer.h): kept in the
// Request so each step only adds the n-grams of its new tokens.
#pragma once

#include <cstdint>
#include <unordered_map>

namespace pagoda {

struct NgramIndex {
  // n-gram hash -> end position (inclusive) of its latest occurrence.
  std::unordered_map<uint64_t, int64_t> latest_end;
  int64_t indexed = 0;  // n-grams ending at positions [0, indexed) are in
  // Tests narrow the hashes to force collisions (the scan fallback).
  uint64_t hash_mask = ~uint64_t{0};
};

}  // namespace pagoda
