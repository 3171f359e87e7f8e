// Micro-benchmark of DeepSeek V4 sparse attention (ops::v4_sparse_attention)
// for one decode token at real widths: head_dim 512 (448 nope + 64 rope),
// 128 window entries plus 512 or 1024 compressed entries (c4a top-k 512 /
// 1024 or a long c128a list), 64 and 128 heads, f32 / bf16 / fp8 (584 B)
// caches. Prints ms per call and its fraction of the two limits: the entry
// bytes over the read roofline, and 2 x 2 x head_dim flops per (head, entry)
// (scores and P.V) over the f32 FMA roofline. Each call reads from one of
// `layers` caches in turn, so entries come from memory. Times are the best
// of several windows (shared machines).
// Not wired into CMake; build against a build tree's libraries, e.g.
//   g++ -O2 -std=c++20 -fopenmp -Isrc bench/v4_attention_bench.cpp \
//       build/libpagoda_ops.a build/libpagoda_core.a -lfmt -o /tmp/v4_bench
//   /tmp/v4_bench [threads] [layers]
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/parallel.h"
#include "ops/ops.h"
#include "ops/roofline.h"

using namespace pagoda;

namespace {

// The clock: on one thread, the process's CPU time, which time slices
// lost to other processes on a shared machine do not inflate (the CPU has
// no SMT siblings here); on several threads, wall time.
bool g_cpu_clock = false;
double now_s() {
  if (g_cpu_clock) {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Seconds per call of fn: the best of 9 windows of >= 40 ms of calls (the
// bench machines are shared; the fastest window is the one least disturbed).
template <typename Fn>
double time_per_call(Fn&& fn) {
  fn();
  int reps = 1;
  double best = 1e30;
  for (int window = 0; window < 9;) {
    const double t0 = now_s();
    for (int r = 0; r < reps; ++r) fn();
    const double s = now_s() - t0;
    if (s < 0.04) {
      reps *= 2;
      continue;
    }
    best = std::min(best, s / reps);
    ++window;
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int layers = argc > 2 ? std::max(1, std::atoi(argv[2])) : 4;
  set_num_threads(threads);
  g_cpu_clock = threads == 1;
  ops::Roofline roof = ops::measure_roofline(threads);
  if (g_cpu_clock) {
    // The FMA peak on the same clock as the calls: best of 9 windows.
    double best = 0;
    for (int i = 0; i < 9; ++i) {
      const double t0 = now_s();
      const double flops = ops::run_peak_loop(ops::PeakKind::Fp32Fma, int64_t{1} << 24);
      best = std::max(best, flops / (now_s() - t0) * 1e-9);
    }
    roof.fp32_gflops = best;
  }
  std::printf("%d threads (%s clock); roofline: read %.1f GB/s, f32 FMA %.1f GFLOP/s\n", threads,
              g_cpu_clock ? "cpu" : "wall", roof.read_gb_per_s, roof.fp32_gflops);
  const int D = 512, R = 64, W = 128, per_page = 64;
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  for (DType dt : {DType::F32, DType::BF16, DType::F8E4M3}) {
    for (int comp : {512, 1024}) {
      // Each layer: a window cache of W entries and a compressed cache of
      // 4 x comp entries, of which comp are listed (shuffled).
      const ops::V4EntryLayout l{per_page, D, R, dt, 0};
      const int comp_entries = 4 * comp;
      std::vector<std::vector<uint8_t>> win(layers), cc(layers);
      std::vector<float> x(size_t(comp_entries) * D);
      for (float& v : x) v = nd(rng);
      std::vector<int64_t> slots(comp_entries);
      std::iota(slots.begin(), slots.end(), 0);
      for (int i = 0; i < layers; ++i) {
        win[i].resize(size_t(W / per_page) * l.page_stride());
        cc[i].resize(size_t(comp_entries / per_page) * l.page_stride());
        ops::write_v4_entries(x.data(), slots.data(), W, l, win[i].data());
        ops::write_v4_entries(x.data(), slots.data(), comp_entries, l, cc[i].data());
      }
      std::vector<int32_t> wl(W), cl(comp_entries);
      std::iota(wl.begin(), wl.end(), 0);
      std::iota(cl.begin(), cl.end(), 0);
      std::shuffle(cl.begin(), cl.end(), rng);
      cl.resize(comp);
      for (int H : {64, 128}) {
        std::vector<float> q(size_t(H) * D), out(q.size()), sink(H, 0.5f);
        for (float& v : q) v = nd(rng) * 0.05f;
        int layer = 0;
        const double s = time_per_call([&] {
          ops::v4_sparse_attention(q.data(), 1, H, win[layer].data(), l, wl.data(), W,
                                   cc[layer].data(), l, cl.data(), comp, sink.data(),
                                   1.0f / std::sqrt(float(D)), out.data());
          layer = (layer + 1) % layers;
        });
        const double entries = W + comp;
        const double bytes = entries * double(l.entry_bytes());
        const double flops = entries * H * 4.0 * D;
        const double t_read = bytes / (roof.read_gb_per_s * 1e9);
        const double t_fma = roof.fp32_gflops > 0 ? flops / (roof.fp32_gflops * 1e9) : 0;
        const double limit = std::max(t_read, t_fma);
        std::printf(
            "%-7s H %3d  %4d entries: %7.3f ms  %6.1f GFLOP/s  %5.1f GB/s  limit %.3f ms (%s)  "
            "%4.0f%% of limit\n",
            std::string(dtype_name(dt)).c_str(), H, int(entries), s * 1e3, flops / s * 1e-9,
            bytes / s * 1e-9, limit * 1e3, t_fma >= t_read ? "fma" : "read", 100.0 * limit / s);
      }
    }
  }
  return 0;
}
