// Micro-benchmark of ops::linear: GFLOP/s per ISA for decode (m = 1) and a
// batch (m = 32, 64, 512), f32, bf16 and packed bf16 weights.
// Not wired into CMake; build against a build tree's libraries, e.g.
//   g++ -O2 -std=c++20 -fopenmp -Isrc bench/ops_bench.cpp \
//       build/libpagoda_ops.a build/libpagoda_core.a -lfmt -o /tmp/ops_bench
//   /tmp/ops_bench [threads] [k] [n]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/parallel.h"
#include "ops/ops.h"
#include "ops/packed.h"

using namespace pagoda;

namespace {

double gflops(const float* x, int64_t m, const ops::Matrix& w, float* y) {
  ops::linear(x, m, w, nullptr, y);  // warm caches and threads
  int reps = 1;
  for (;;) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) ops::linear(x, m, w, nullptr, y);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 0.2) return 2.0 * m * w.rows * w.cols * reps / s * 1e-9;
    reps *= 2;
  }
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
  for (ops::Isa isa : {ops::Isa::Scalar, ops::Isa::Avx2, ops::Isa::Avx512, ops::Isa::Avx512Bf16}) {
    if (!ops::isa_supported(isa)) continue;
    ops::set_isa(isa);
    for (const char* kind : {"f32", "bf16", "bf16p"}) {
      const std::string name = kind;
      if (name == "bf16p" && !ops::packed_bf16_is_native()) continue;
      ops::Matrix w{name == "f32" ? static_cast<const void*>(wf.data()) : wb.data(),
                    name == "f32" ? DType::F32 : DType::BF16, n, k};
      if (name == "bf16p") w = ops::pack_matrix(w, panels);
      for (int64_t m : {1, 32, 64, 512}) {
        if (isa == ops::Isa::Scalar && m > 64) continue;  // minutes
        std::printf("%-10s %-5s m=%-3lld %8.1f\n", ops::isa_name(isa), kind, (long long)m,
                    gflops(x.data(), m, w, y.data()));
      }
    }
  }
}
