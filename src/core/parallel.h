// The one kernel thread pool: OpenMP's (also used by oneDNN later), so ops
// never oversubscribe the cores. Ops split work with parallel_for.
#pragma once

#include <cstdint>

namespace pagoda {

// Number of threads kernels use; set once at start (--threads).
void set_num_threads(int n);
int num_threads();

// Calls fn(begin, end) on disjoint chunks covering [0, n), in parallel
// when n is large enough to be worth it (n >= min_per_thread * 2).
template <typename Fn>
void parallel_for(int64_t n, int64_t min_per_thread, Fn&& fn) {
  const int64_t threads = num_threads();
  if (threads <= 1 || n < 2 * min_per_thread) {
    if (n > 0) fn(int64_t{0}, n);
    return;
  }
  int64_t chunks = n / min_per_thread;
  if (chunks > threads) chunks = threads;
#pragma omp parallel for num_threads(chunks) schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = n * c / chunks, end = n * (c + 1) / chunks;
    fn(begin, end);
  }
}

}  // namespace pagoda
