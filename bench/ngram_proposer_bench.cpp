// Micro-benchmark of the n-gram proposer's per-step cost at long contexts:
// the request's incremental index (NgramProposer::propose) against what
// the engine did before (copy prompt + output into one vector, then
// propose_by_scan: one backwards scan per n), over `steps` decode steps
// that each append one token to a context of `context` tokens.
// Workloads: "random" (a 100k-token alphabet: suffixes rarely recur, so
// the scan reads the whole context for every n) and "loop" (a repeating
// 64-token text: matches are found near the end at once).
// Not wired into CMake; build against a build tree's library, e.g.
//   g++ -O2 -std=c++20 -Isrc bench/ngram_proposer_bench.cpp build/libpagoda_engine.a -o /tmp/ngram_bench
//   /tmp/ngram_bench [context=32768] [steps=256] [min_n=1] [max_n=4] [k=4]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "engine/spec_decode/ngram_proposer.h"

using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  const int64_t context = argc > 1 ? std::atoll(argv[1]) : 32768;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 256;
  const int32_t min_n = argc > 3 ? std::atoi(argv[3]) : 1;
  const int32_t max_n = argc > 4 ? std::atoi(argv[4]) : 4;
  const int32_t k = argc > 5 ? std::atoi(argv[5]) : 4;
  const pagoda::NgramProposer proposer(min_n, max_n);
  for (const std::string workload : {"random", "loop"}) {
    std::mt19937_64 rng(1);
    auto token = [&](int64_t i) {
      return workload == "random" ? static_cast<int32_t>(rng() % 100000) : static_cast<int32_t>(i % 64);
    };
    std::vector<int32_t> prompt(static_cast<size_t>(context));
    for (int64_t i = 0; i < context; ++i) prompt[static_cast<size_t>(i)] = token(i);
    std::vector<int32_t> output, draft, copy;
    // The index: the first step indexes the prompt (once per request).
    pagoda::NgramIndex index;
    auto t0 = Clock::now();
    proposer.lookup(prompt, output, k, &index, &draft);
    const double first_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    std::vector<std::vector<int32_t>> drafts;
    t0 = Clock::now();
    for (int s = 0; s < steps; ++s) {
      output.push_back(token(context + s));
      proposer.lookup(prompt, output, k, &index, &draft);
      drafts.push_back(draft);
    }
    const double index_us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / steps;
    // Before: a copy of the context and a scan, every step.
    output.clear();
    t0 = Clock::now();
    int mismatches = 0;
    rng.seed(1);
    for (int64_t i = 0; i < context; ++i) (void)token(i);  // same token stream as above
    for (int s = 0; s < steps; ++s) {
      output.push_back(token(context + s));
      copy.assign(prompt.begin(), prompt.end());
      copy.insert(copy.end(), output.begin(), output.end());
      proposer.propose_by_scan(copy, k, &draft);
      mismatches += draft != drafts[static_cast<size_t>(s)];
    }
    const double scan_us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / steps;
    std::printf("%-6s context %lld, n %d..%d, k %d: index %.2f us/step (first step, indexing the prompt: %.1f ms) | "
                "copy + scan %.1f us/step | %.0fx | drafts differ on %d of %d steps\n",
                workload.c_str(), static_cast<long long>(context), min_n, max_n, k, index_us, first_ms, scan_us,
                scan_us / index_us, mismatches, steps);
  }
  return 0;
}
