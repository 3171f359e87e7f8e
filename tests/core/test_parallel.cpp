// The kernel thread pool: every index covered exactly once, exceptions
// reach the caller, nested calls run inline, and resizing the pool while
// its workers sleep never hangs (a worker thread that started late once waited forever).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "core/parallel.h"

namespace pagoda::testing {
namespace {

struct ScopedThreads {
  explicit ScopedThreads(int n) : old(num_threads()) { set_num_threads(n); }
  ~ScopedThreads() { set_num_threads(old); }
  int old;
};

TEST(Parallel, CoversEveryIndexOnce) {
  ScopedThreads threads(2);
  for (int64_t n : {0, 1, 7, 100, 1001}) {
    for (int64_t min_per : {1, 3, 64}) {
      std::vector<std::atomic<int>> hits(n);
      parallel_for(n, min_per, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(hits[i].load(), 1) << n << " " << min_per << " " << i;
    }
  }
}

TEST(Parallel, TaperedCoversEveryIndexOnce) {
  for (int threads : {1, 2, 3}) {
    ScopedThreads scoped(threads);
    for (int64_t n : {0, 1, 7, 100, 1001}) {
      for (int64_t min_chunk : {1, 3, 64}) {
        std::vector<std::atomic<int>> hits(n);
        parallel_for_tapered(n, 2, min_chunk, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
        });
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(hits[i].load(), 1) << threads << " " << n << " " << min_chunk << " " << i;
      }
    }
  }
}

// Tapered jobs: thread t owns [n t / T, n (t + 1) / T) and claims it from
// the front, each claim a quarter of what is left of it (at least
// min_chunk), so the caller's chunks in its region run one after another
// from 0 and never grow. (A thread only takes from another's region at its
// back, below.)
TEST(Parallel, TaperedChunksRunEachRegionFromItsFront) {
  ScopedThreads threads(2);
  const int64_t n = 1000, min_chunk = 4, region_end = n / 2;
  const auto caller = std::this_thread::get_id();
  std::vector<std::pair<int64_t, int64_t>> own;  // only the caller appends
  parallel_for_tapered(n, 1, min_chunk, [&](int64_t b, int64_t e) {
    if (std::this_thread::get_id() == caller && b < region_end) own.emplace_back(b, e);
  });
  ASSERT_FALSE(own.empty());
  int64_t at = 0, last = region_end;
  for (const auto& [b, e] : own) {
    ASSERT_EQ(b, at);
    EXPECT_LE(e, region_end);
    EXPECT_LE(e - b, std::max(min_chunk, (region_end - b) / 4));
    EXPECT_LE(e - b, last);
    last = e - b;
    at = e;
  }
  EXPECT_LE(own.front().second, region_end / 4);
}

// A thread whose region is done takes the rest of a slow thread's region,
// half by half from its back: here the worker stalls in its first chunk
// until the caller has taken some of the worker's region (10 s at most).
TEST(Parallel, TaperedIdleThreadTakesFromASlowOnesRegion) {
  ScopedThreads threads(2);
  const int64_t n = 64;
  const auto caller = std::this_thread::get_id();
  std::atomic<int64_t> taken{0};  // items of the worker's region the caller ran
  parallel_for_tapered(n, 1, 1, [&](int64_t b, int64_t e) {
    if (std::this_thread::get_id() == caller) {
      if (b >= n / 2) taken.fetch_add(e - b);
      return;
    }
    for (int ms = 0; ms < 10000 && taken.load() == 0; ++ms)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  EXPECT_GT(taken.load(), 0);
}

// Regions hold 32-bit bounds: a longer tapered range runs as equal chunks.
TEST(Parallel, TaperedBeyond32BitsCoversEveryIndexOnce) {
  ScopedThreads threads(2);
  const int64_t n = (int64_t{1} << 32) + 7;
  std::atomic<int64_t> items{0}, chunks{0};
  parallel_for_tapered(n, 1, 1 << 20, [&](int64_t b, int64_t e) {
    items.fetch_add(e - b);
    chunks.fetch_add(1);
  });
  EXPECT_EQ(items.load(), n);
  EXPECT_EQ(chunks.load(), 8);
}

TEST(Parallel, UsesMoreThanOneThread) {
  ScopedThreads threads(2);
  std::atomic<int> in_flight{0}, max_in_flight{0};
  // Each chunk waits briefly for a partner; with two threads, two chunks
  // overlap at some point.
  for (int attempt = 0; attempt < 50 && max_in_flight.load() < 2; ++attempt) {
    parallel_for(8, 1, [&](int64_t, int64_t) {
      const int now = in_flight.fetch_add(1) + 1;
      int seen = max_in_flight.load();
      while (now > seen && !max_in_flight.compare_exchange_weak(seen, now)) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      in_flight.fetch_sub(1);
    });
  }
  EXPECT_EQ(max_in_flight.load(), 2);
}

TEST(Parallel, ExceptionReachesCaller) {
  ScopedThreads threads(2);
  EXPECT_THROW(parallel_for(64, 1,
                            [](int64_t b, int64_t) {
                              if (b == 0) throw std::runtime_error("chunk");
                            }),
               std::runtime_error);
  int64_t sum = 0;  // the pool still works afterwards
  parallel_for(10, 5, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) __atomic_add_fetch(&sum, i, __ATOMIC_RELAXED);
  });
  EXPECT_EQ(sum, 45);
}

TEST(Parallel, NestedCallsRunInline) {
  ScopedThreads threads(2);
  std::atomic<int64_t> total{0};
  parallel_for(4, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      parallel_for(100, 1, [&](int64_t b2, int64_t e2) { total.fetch_add(e2 - b2); });
    }
  });
  EXPECT_EQ(total.load(), 400);
}

TEST(Parallel, ResizingWhileWorkersSleepDoesNotHang) {
  for (int round = 0; round < 20; ++round) {
    ScopedThreads threads(round % 2 ? 2 : 3);
    std::atomic<int> n{0};
    parallel_for(16, 1, [&](int64_t b, int64_t e) { n.fetch_add(static_cast<int>(e - b)); });
    EXPECT_EQ(n.load(), 16);
    // Long enough for the workers to stop spinning and go to sleep.
    std::this_thread::sleep_for(std::chrono::milliseconds(round % 4 == 0 ? 20 : 0));
  }
}

}  // namespace
}  // namespace pagoda::testing
