// The one kernel thread pool: every op splits its work with parallel_for,
// so ops never oversubscribe the cores. Workers spin briefly between jobs
// (ops come back to back in a forward pass) and then sleep; chunks are
// handed out dynamically, so a worker the OS delays does not hold the
// others up (the calling thread takes its chunks instead).
#pragma once

#include <cstdint>
#include <type_traits>

namespace pagoda {

// Number of threads kernels use (the calling thread included); set once at
// start (--threads). Changing it restarts the pool's workers.
void set_num_threads(int n);
int num_threads();

namespace detail {
using ChunkFn = void (*)(void* ctx, int64_t begin, int64_t end);
// Runs fn on disjoint chunks covering [0, n) on the pool's threads: `chunks`
// equal ones, or (min_chunk > 0) tapered ones (parallel_for_tapered).
void run_parallel(int64_t n, int64_t chunks, int64_t min_chunk, ChunkFn fn, void* ctx);
}  // namespace detail

namespace detail {
// parallel_for and parallel_for_tapered: serial below 2 x min_per_thread
// items (or on one thread), else equal chunks (min_chunk 0) or tapered ones.
template <typename Fn>
void parallel_chunks(int64_t n, int64_t min_per_thread, int64_t min_chunk, Fn&& fn) {
  const int64_t threads = num_threads();
  if (min_per_thread < 1) min_per_thread = 1;
  if (threads <= 1 || n < 2 * min_per_thread) {
    if (n > 0) fn(int64_t{0}, n);
    return;
  }
  // A few chunks per thread balance the load when a thread is late.
  int64_t chunks = min_chunk > 0 ? 0 : n / min_per_thread;
  if (chunks > 4 * threads) chunks = 4 * threads;
  using F = std::remove_reference_t<Fn>;
  run_parallel(
      n, chunks, min_chunk, [](void* ctx, int64_t b, int64_t e) { (*static_cast<F*>(ctx))(b, e); },
      const_cast<void*>(static_cast<const void*>(&fn)));
}
}  // namespace detail

// Calls fn(begin, end) on disjoint chunks covering [0, n), in parallel
// when n is large enough to be worth it (n >= min_per_thread * 2). Chunks
// are at least min_per_thread long (except that the last may be shorter
// when n is not a multiple), and which thread runs which chunk is not
// fixed: results must not depend on it. Nested or concurrent calls run
// serially on the calling thread.
template <typename Fn>
void parallel_for(int64_t n, int64_t min_per_thread, Fn&& fn) {
  detail::parallel_chunks(n, min_per_thread, 0, fn);
}

// parallel_for for a stream whose threads may run at different speeds (a
// decode linear: each thread's share of the memory bandwidth varies).
// Thread t of T owns the region [n t / T, n (t + 1) / T) and claims it from
// the front, each claim a quarter of what is left of it (at least
// min_chunk); a thread whose region is done takes half of what is left of
// the fullest other region, from its back. So the threads finish within
// one small chunk of each other (two threads streaming fixed halves of a
// decode linear finish 12% or more apart in a quarter of the linears:
// bench/every_cpu.md, session 23), each streams one run of addresses, and
// a claim touches no cache line the other thread wrote unless it takes
// from that thread's region (bench/every_cpu.md, session 24). Which
// thread runs which items depends on timing. Runs in parallel when
// n >= min_per_thread * 2, like parallel_for.
template <typename Fn>
void parallel_for_tapered(int64_t n, int64_t min_per_thread, int64_t min_chunk, Fn&& fn) {
  detail::parallel_chunks(n, min_per_thread, min_chunk < 1 ? 1 : min_chunk, fn);
}

}  // namespace pagoda
