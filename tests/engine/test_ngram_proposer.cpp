// The n-gram proposer's incremental index against the whole-context scan
// (NgramProposer::propose_by_scan, the algorithm it replaced): on random
// sequences over small alphabets (many repeats), grown one token at a time
// or several at once as accepted drafts arrive, split into prompt and
// output at random, every step's draft must be the scan's, for several
// (min_n, max_n, k); also with hashes narrowed to 3 bits, so collisions
// take the scan fallback, and with more lengths than are indexed.
#include <gtest/gtest.h>

#include <random>

#include "engine/spec_decode/ngram_proposer.h"

namespace pagoda {
namespace {

void check_equal_to_scan(uint64_t hash_mask, int seeds) {
  for (int seed = 1; seed <= seeds; ++seed) {
    std::mt19937_64 rng(seed);
    const int32_t min_n = 1 + static_cast<int32_t>(rng() % 3);
    const int32_t max_n = min_n + static_cast<int32_t>(rng() % 4);
    const NgramProposer proposer(min_n, max_n);
    const int32_t alphabet = 2 + static_cast<int32_t>(rng() % 7);
    std::vector<int32_t> prompt(1 + rng() % 40), output;
    for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % alphabet);
    NgramIndex index;
    index.hash_mask = hash_mask;
    std::vector<int32_t> draft, want, context;
    for (int step = 0; step < 300; ++step) {
      const auto k = static_cast<int32_t>(rng() % 6);
      proposer.lookup(prompt, output, k, &index, &draft);
      context = prompt;
      context.insert(context.end(), output.begin(), output.end());
      proposer.propose_by_scan(context, k, &want);
      ASSERT_EQ(draft, want) << "seed " << seed << " step " << step << " n " << min_n << ".." << max_n;
      // One token, or a few (an accepted run of drafts).
      for (uint64_t add = 1 + (rng() % 4 == 0 ? rng() % 5 : 0); add > 0; --add)
        output.push_back(static_cast<int32_t>(rng() % alphabet));
    }
  }
}

TEST(NgramProposer, IndexDraftsEqualTheScansOnRandomSequences) { check_equal_to_scan(~uint64_t{0}, 40); }

TEST(NgramProposer, HashCollisionsFallBackToTheScan) { check_equal_to_scan(0x7, 40); }

// min_n..max_n wider than the indexed lengths: the longer n are scanned.
TEST(NgramProposer, WideRangesScanTheLongerLengths) {
  for (int seed = 1; seed <= 20; ++seed) {
    std::mt19937_64 rng(seed);
    const NgramProposer proposer(1, 12);
    std::vector<int32_t> context, draft, want;
    NgramIndex index;
    // A period-10 text with a few random changes: long suffixes recur.
    for (int step = 0; step < 200; ++step) {
      context.push_back(rng() % 8 == 0 ? static_cast<int32_t>(rng() % 3) : step % 10);
      proposer.lookup(context, {}, 4, &index, &draft);
      proposer.propose_by_scan(context, 4, &want);
      ASSERT_EQ(draft, want) << "seed " << seed << " step " << step;
    }
  }
}

// A new context (shorter than what the index holds) rebuilds the index.
TEST(NgramProposer, AnIndexOfALongerContextIsRebuilt) {
  const NgramProposer proposer(1, 3);
  NgramIndex index;
  std::vector<int32_t> draft, want;
  const std::vector<int32_t> a = {1, 2, 3, 1, 2, 3, 1, 2}, b = {7, 8, 7};
  proposer.lookup(a, {}, 3, &index, &draft);
  EXPECT_EQ(draft, (std::vector<int32_t>{3, 1, 2}));
  proposer.lookup(b, {}, 2, &index, &draft);
  proposer.propose_by_scan(b, 2, &want);
  EXPECT_EQ(draft, want);
  EXPECT_EQ(draft, (std::vector<int32_t>{8, 7}));
}

}  // namespace
}  // namespace pagoda
