#include "core/parallel.h"

#include <omp.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace pagoda {

namespace {

// The spin-wait hint: pause on x86, yield on AArch64 (both tell the core,
// and an SMT sibling, that this thread is only polling).
inline void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// How long a worker spins for the next job before it sleeps: longer than
// the gap between two ops of a forward pass. Measured in time, not pause
// instructions (a pause costs ~5 to ~140 cycles depending on the CPU: 32K of
// them can last milliseconds, a core taken from the caller when the cores
// are shared).
constexpr auto kWorkerSpin = std::chrono::microseconds(50);
// How long the caller spins for chunks other threads hold before it yields
// its core between checks (their thread may be waiting for a core).
constexpr auto kCallerSpin = std::chrono::microseconds(20);

// Spins on `ready` with pause, checking the clock every 64 rounds; after
// `budget` returns whether it holds (the caller then sleeps or yields).
template <typename Ready>
bool spin_until(Ready&& ready, std::chrono::microseconds budget) {
  const auto deadline = std::chrono::steady_clock::now() + budget;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (ready()) return true;
      cpu_relax();
    }
    if (std::chrono::steady_clock::now() > deadline) return ready();
  }
}

// Job protocol. `gen_` is odd while a job is open, even when closed. A
// worker announces itself in `active_` and re-checks the generation before
// reading the job (the caller closes the job, then waits for active_ == 0
// before writing the next one), so a late worker never reads a half-written
// job. Chunks are claimed as `claim` says; each thread counts the items it
// ran in its own slot, and the caller returns when their sum reaches what
// all jobs so far handed out.
//
// Per chunk, a thread touches only its own slot's cache line unless it
// steals. Where the two vCPUs sit on different CCDs, a line the other core
// wrote last costs a ~250 ns transfer, and a shared counter bumped by both
// after every chunk (as `next_` and a shared done count were for tapered
// jobs) cost one such stall per chunk (bench/every_cpu.md, session 24).
//
// Workers start from generation 0, not from the value when their thread
// first runs: a thread the OS starts late (after a whole job, or after the
// destructor's bump) would otherwise wait for a change that already
// happened, and join() would hang. Sleeping uses a mutex and condition
// variable: the caller takes the mutex after changing `gen_` and before
// notifying, and a worker re-checks `gen_` under it, so no wake-up is lost.
class Pool {
 public:
  explicit Pool(int threads) {
    slots_ = std::make_unique<Slot[]>(static_cast<size_t>(threads));
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { work(i); });
  }

  ~Pool() {
    wait_inactive();
    stop_.store(true);
    gen_.fetch_add(1);
    wake_all();
    for (auto& w : workers_) w.join();
  }

  void run(int64_t n, int64_t chunks, int64_t min_chunk, detail::ChunkFn fn, void* ctx) {
    wait_inactive();
    if (min_chunk > 0 && n > int64_t{0xffffffff}) {  // regions hold 32-bit bounds
      min_chunk = 0;
      chunks = 4 * threads();
    }
    n_ = n;
    chunks_ = chunks;
    min_chunk_ = min_chunk;
    fn_ = fn;
    ctx_ = ctx;
    next_.store(0, std::memory_order_relaxed);
    if (min_chunk > 0) {  // each thread's region of a tapered job
      for (int t = 0; t < threads(); ++t)
        slots_[t].region.store(pack(n * t / threads(), n * (t + 1) / threads()),
                               std::memory_order_relaxed);
    }
    handed_out_ += n;
    const uint64_t open = gen_.load(std::memory_order_relaxed) + 1;
    gen_.store(open);  // seq_cst: publishes the job
    wake_all();
    claim_and_run(0);
    auto all_done = [&] { return items_done() >= handed_out_; };
    if (!all_done()) {
      if (!spin_until(all_done, kCallerSpin)) {
        while (!all_done()) std::this_thread::yield();
      }
    }
    gen_.store(open + 1);  // closed
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

 private:
  // The caller and the workers.
  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  // A tapered job's region [lo, hi) of one thread, in one word so that its
  // owner (from the front) and a thief (from the back) claim with one CAS.
  static uint64_t pack(int64_t lo, int64_t hi) {
    return static_cast<uint64_t>(lo) | static_cast<uint64_t>(hi) << 32;
  }
  static int64_t lo_of(uint64_t v) { return static_cast<int64_t>(v & 0xffffffffu); }
  static int64_t hi_of(uint64_t v) { return static_cast<int64_t>(v >> 32); }

  // Claims the next chunk into [b, e) for thread `self` (0 is the caller);
  // false when none is left. Equal chunks are claimed by index (next_
  // counts chunks). Tapered ones: see parallel.h.
  bool claim(int self, int64_t& b, int64_t& e) {
    if (min_chunk_ == 0) {
      const int64_t c = next_.fetch_add(1, std::memory_order_relaxed);
      if (c >= chunks_) return false;
      b = n_ * c / chunks_;
      e = n_ * (c + 1) / chunks_;
      return true;
    }
    std::atomic<uint64_t>& own = slots_[self].region;
    uint64_t v = own.load(std::memory_order_relaxed);
    while (lo_of(v) < hi_of(v)) {  // a quarter of what is left of its own region
      const int64_t lo = lo_of(v), left = hi_of(v) - lo;
      const int64_t take = std::min(left, std::max(min_chunk_, left / 4));
      if (own.compare_exchange_weak(v, pack(lo + take, hi_of(v)), std::memory_order_relaxed)) {
        b = lo;
        e = lo + take;
        return true;
      }
    }
    for (;;) {  // then half of what is left of the fullest other region, from its back
      int victim = -1;
      int64_t left = 0;
      for (int t = 0; t < threads(); ++t) {
        const uint64_t r = slots_[t].region.load(std::memory_order_relaxed);
        if (t != self && hi_of(r) - lo_of(r) > left) {
          victim = t;
          v = r;
          left = hi_of(r) - lo_of(r);
        }
      }
      if (victim < 0) return false;
      const int64_t take = std::min(left, std::max(min_chunk_, left / 2));
      // Fails (and the scan runs again) if the region changed since it was read.
      if (slots_[victim].region.compare_exchange_weak(v, pack(lo_of(v), hi_of(v) - take),
                                                      std::memory_order_relaxed)) {
        b = hi_of(v) - take;
        e = hi_of(v);
        return true;
      }
    }
  }

  // Items run by every thread since the pool started.
  int64_t items_done() const {
    int64_t sum = 0;
    for (int t = 0; t < threads(); ++t) sum += slots_[t].done.load(std::memory_order_acquire);
    return sum;
  }

  // Runs chunks until none are left, counting them in its slot.
  void claim_and_run(int self) {
    int64_t b, e;
    std::atomic<int64_t>& done = slots_[self].done;
    while (claim(self, b, e)) {
      try {
        fn_(ctx_, b, e);
      } catch (...) {  // the caller rethrows the first one once every chunk is done
        std::lock_guard lock(error_mutex_);
        if (!error_) error_ = std::current_exception();
      }
      // Only this thread writes its count: a plain store, no locked op.
      done.store(done.load(std::memory_order_relaxed) + (e - b), std::memory_order_release);
    }
  }

  void wake_all() {
    { std::lock_guard lock(sleep_mutex_); }
    wake_.notify_all();
  }

  void wait_inactive() {
    while (active_.load() != 0) cpu_relax();
  }

  void work(int self) {
    uint64_t seen = 0;  // see the class comment
    for (;;) {
      if (stop_.load()) return;
      uint64_t g = seen;
      spin_until([&] { return (g = gen_.load(std::memory_order_acquire)) != seen; }, kWorkerSpin);
      if (g == seen) {
        std::unique_lock lock(sleep_mutex_);
        wake_.wait(lock, [&] { return gen_.load() != seen || stop_.load(); });
        continue;
      }
      seen = g;
      if (g % 2 == 0) continue;  // closed before we looked
      active_.fetch_add(1);      // seq_cst, then re-check: see the class comment
      if (gen_.load() == g) claim_and_run(self);
      active_.fetch_sub(1);
    }
  }

  std::vector<std::thread> workers_;
  std::atomic<uint64_t> gen_{0};
  std::atomic<int> active_{0};
  std::atomic<bool> stop_{false};
  // Per thread (0 is the caller), one cache line each: a tapered job's
  // region, and the items it has run.
  struct alignas(64) Slot {
    std::atomic<uint64_t> region{0};
    std::atomic<int64_t> done{0};
  };
  std::unique_ptr<Slot[]> slots_;
  int64_t handed_out_ = 0;  // items of all jobs so far (the caller's alone)
  std::atomic<int64_t> next_{0};
  int64_t n_ = 0, chunks_ = 0, min_chunk_ = 0;
  detail::ChunkFn fn_ = nullptr;
  void* ctx_ = nullptr;
  std::mutex sleep_mutex_;
  std::condition_variable wake_;
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

int g_num_threads = std::max(1u, std::thread::hardware_concurrency());
std::mutex g_pool_mutex;  // one job at a time; held while a job runs
std::unique_ptr<Pool> g_pool;
thread_local bool t_in_job = false;

}  // namespace

void set_num_threads(int n) {
  std::lock_guard lock(g_pool_mutex);
  n = std::max(1, n);
  if (n != g_num_threads) g_pool.reset();
  g_num_threads = n;
  omp_set_num_threads(g_num_threads);
}

int num_threads() { return g_num_threads; }

namespace detail {

void run_parallel(int64_t n, int64_t chunks, int64_t min_chunk, ChunkFn fn, void* ctx) {
  std::unique_lock lock(g_pool_mutex, std::try_to_lock);
  if (!lock.owns_lock() || t_in_job) {  // nested or concurrent: run here
    fn(ctx, 0, n);
    return;
  }
  if (!g_pool) g_pool = std::make_unique<Pool>(g_num_threads);
  struct InJob {
    InJob() { t_in_job = true; }
    ~InJob() { t_in_job = false; }
  } in_job;
  g_pool->run(n, chunks, min_chunk, fn, ctx);
}

}  // namespace detail

}  // namespace pagoda
