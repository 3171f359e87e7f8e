// Micro-benchmark of ops::linear: GFLOP/s per ISA for decode (m = 1) and a
// batch (m = 32, 64, 512), f32, bf16, packed bf16, int8 and packed int8 weights,
// each next to its percentage of the peak the kernel runs at (the
// selected ISA's probe, ops/roofline.h, measured just before).
// Not wired into CMake; build against a build tree's libraries, e.g.
//   g++ -O2 -std=c++20 -fopenmp -Isrc bench/ops_bench.cpp build/libpagoda_models.a \
//       build/libpagoda_ops.a build/libpagoda_core.a -lfmt -o /tmp/ops_bench
//   /tmp/ops_bench [threads] [k] [n] [isa]
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/parallel.h"
#include "ops/ops.h"
#include "models/quantize.h"
#include "ops/packed.h"
#include "ops/roofline.h"

using namespace pagoda;

namespace {

// Seconds of this thread's CPU time: with one kernel thread, other
// processes on a shared host then do not count (as v4_attention_bench).
double thread_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

double now_s(bool cpu_clock) {
  return cpu_clock ? thread_seconds()
                   : std::chrono::duration<double>(
                         std::chrono::steady_clock::now().time_since_epoch())
                         .count();
}

double gflops(const float* x, int64_t m, const ops::Matrix& w, float* y) {
  const bool cpu_clock = num_threads() == 1;
  ops::linear(x, m, w, nullptr, y);  // warm caches and threads
  int reps = 1;
  for (;;) {
    const double t0 = now_s(cpu_clock);
    for (int r = 0; r < reps; ++r) ops::linear(x, m, w, nullptr, y);
    const double s = now_s(cpu_clock) - t0;
    if (s > 0.2) return 2.0 * m * w.rows * w.cols * reps / s * 1e-9;
    reps *= 2;
  }
}

// The kind's peak: on one thread the best of 5 probe runs on the thread's
// CPU clock, else the roofline's (wall clock, every thread).
double peak_gflops(ops::PeakKind kind) {
  if (num_threads() > 1) {
    const ops::Roofline r = ops::measure_roofline(num_threads(), 0.1, 1 << 20);
    return kind == ops::PeakKind::Fp32Fma   ? r.fp32_gflops
           : kind == ops::PeakKind::Int8Dot ? r.int8_gops
                                            : r.bf16_gflops;
  }
  double best = 0;
  for (int i = 0; i < 5; ++i) {
    const double t0 = thread_seconds();
    const double ops = ops::run_peak_loop(kind, int64_t{1} << 22);
    best = std::max(best, ops / (thread_seconds() - t0) * 1e-9);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  set_num_threads(argc > 1 ? std::atoi(argv[1]) : 1);
  const int64_t k = argc > 2 ? std::atoll(argv[2]) : 1024,
                n = argc > 3 ? std::atoll(argv[3]) : 1024;
  std::mt19937 rng(0);
  std::normal_distribution<float> d;
  std::vector<float> wf(n * k), x(512 * k), y(512 * n);
  for (float& v : wf) v = d(rng);
  for (float& v : x) v = d(rng);
  std::vector<bf16_t> wb(wf.size());
  for (size_t i = 0; i < wf.size(); ++i) wb[i] = f32_to_bf16(wf[i]);
  std::printf("threads %d, k %lld, n %lld: GFLOP/s\n", num_threads(), (long long)k, (long long)n);
  // 64-byte aligned panels of the bf16 matrix (ops/packed.h).
  std::vector<uint8_t> panel_bytes(ops::packed_bytes(n, k, DType::BF16) + 64);
  void* panels =
      panel_bytes.data() + (64 - reinterpret_cast<uintptr_t>(panel_bytes.data()) % 64) % 64;
  // int8: quantized and packed (64-byte aligned, as the loader does).
  std::vector<uint8_t> q_bytes(int8_matrix_bytes(n, k) + 64), qp_bytes(int8_matrix_bytes(n, k, true) + 64);
  auto aligned = [](std::vector<uint8_t>& v) {
    return v.data() + (64 - reinterpret_cast<uintptr_t>(v.data()) % 64) % 64;
  };
  const ops::Matrix q = quantize_matrix_int8({wf.data(), DType::F32, n, k}, aligned(q_bytes));
  const std::string only = argc > 4 ? argv[4] : "";
  for (ops::Isa isa : ops::supported_isas()) {
    if (!only.empty() && only != ops::isa_name(isa)) continue;
    ops::set_isa(isa);
    for (const char* kind : {"f32", "bf16", "bf16p", "i8", "i8p"}) {
      const std::string name = kind;
      if (name == "bf16p" && !ops::packed_bf16_is_native()) continue;
      if (name == "i8p" && !ops::packed_i8_is_native()) continue;
      ops::Matrix w{name == "f32" ? static_cast<const void*>(wf.data()) : wb.data(),
                    name == "f32" ? DType::F32 : DType::BF16, n, k};
      if (name == "bf16p") w = ops::pack_matrix(w, panels);
      if (name == "i8") w = q;
      if (name == "i8p") w = repack_int8(q, aligned(qp_bytes));
      const ops::PeakKind peak_kind = name == "f32"     ? ops::PeakKind::Fp32Fma
                                      : name[0] == 'i' ? ops::PeakKind::Int8Dot
                                                       : ops::PeakKind::Bf16Dot;
      const double peak = peak_gflops(ops::PeakKind::Fp32Fma);
      const double kind_peak = peak_gflops(peak_kind);
      for (int64_t m : {1, 32, 64, 512}) {
        if (isa == ops::Isa::Scalar && m > 64) continue;  // minutes
        const double g = gflops(x.data(), m, w, y.data());
        std::printf("%-10s %-5s m=%-3lld %8.1f  (%5.1f%% of %s %.0f, %5.1f%% of fp32 %.0f)\n",
                    ops::isa_name(isa), kind, (long long)m, g, 100 * g / kind_peak,
                    ops::peak_probe(peak_kind, isa).name, kind_peak, 100 * g / peak, peak);
      }
    }
  }
}
