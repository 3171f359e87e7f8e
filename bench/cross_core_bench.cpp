// Which of two placements a 2-vCPU guest got: samples, side by side, the
// round trip of a cache line between two threads and the read bandwidth of
// one and of two threads (ops::ReadProbe, the probe bench latency judges
// decode by). On the Zen 4 host of bench/every_cpu.md (session 24) the two
// vCPUs either share a CCD (round trip ~120-220 ns; two threads read
// ~30-36 GB/s, barely more than one: one CCD's link to memory) or sit on
// two CCDs (round trip ~430-630 ns; two threads read ~55-65 GB/s). The
// placement flips between runs and within one, so a decode figure is only
// comparable to another taken in the same placement.
// Not wired into CMake; build against a build tree's libraries, e.g.
//   g++ -O2 -std=c++20 -fopenmp -Isrc bench/cross_core_bench.cpp build/libpagoda_ops.a \
//       build/libpagoda_core.a -lfmt -o /tmp/cross_core_bench
//   /tmp/cross_core_bench [samples]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "core/parallel.h"
#include "ops/roofline.h"

using namespace pagoda;

namespace {

using Clock = std::chrono::steady_clock;

// Mean round trip, in ns, of a counter bounced between this thread and
// another one through two cache lines.
double round_trip_ns(int trips) {
  struct alignas(64) Line {
    std::atomic<int> value{0};
  };
  Line ping, pong;
  std::thread other([&] {
    for (int i = 1; i <= trips; ++i) {
      while (ping.value.load(std::memory_order_acquire) != i) {
      }
      pong.value.store(i, std::memory_order_release);
    }
  });
  const auto t0 = Clock::now();
  for (int i = 1; i <= trips; ++i) {
    ping.value.store(i, std::memory_order_release);
    while (pong.value.load(std::memory_order_acquire) != i) {
    }
  }
  const double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / trips;
  other.join();
  return ns;
}

// Best of three passes of the read probe on `threads` threads, in GB/s.
double read_gb_per_s(ops::ReadProbe& probe, int threads) {
  set_num_threads(threads);
  double best = 0;
  for (int pass = 0; pass < 3; ++pass) best = std::max(best, probe.measure());
  return best * 1e-9;
}

}  // namespace

int main(int argc, char** argv) {
  const int samples = argc > 1 ? std::atoi(argv[1]) : 20;
  ops::ReadProbe probe(int64_t{1} << 30);  // 1 GiB: far past every cache
  std::printf("round trip (ns) | read, 2 threads (GB/s) | read, 1 thread (GB/s)\n");
  for (int s = 0; s < samples; ++s) {
    const double rt = round_trip_ns(20000);
    const double two = read_gb_per_s(probe, 2), one = read_gb_per_s(probe, 1);
    std::printf("%15.0f | %22.1f | %21.1f\n", rt, two, one);
    std::fflush(stdout);
  }
}
