// Micro-benchmark of ops::linear: GFLOP/s per ISA for decode (m = 1) and a
// prefill-sized batch (m = 64, 512), f32 and bf16 weights.
// Not wired into CMake; build against a build tree's libraries, e.g.
//   g++ -O2 -std=c++20 -fopenmp -Isrc bench/ops_bench.cpp \
//       build/libpagoda_ops.a build/libpagoda_core.a -lfmt -o /tmp/ops_bench
//   /tmp/ops_bench [threads] [k] [n]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/parallel.h"
#include "ops/ops.h"

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
  for (ops::Isa isa : {ops::Isa::Scalar, ops::Isa::Avx2, ops::Isa::Avx512, ops::Isa::Avx512Bf16}) {
    if (!ops::isa_supported(isa)) continue;
    ops::set_isa(isa);
    for (DType dt : {DType::F32, DType::BF16}) {
      const ops::Matrix w{dt == DType::BF16 ? static_cast<const void*>(wb.data()) : wf.data(), dt,
                          n, k};
      for (int64_t m : {1, 64, 512}) {
        if (isa == ops::Isa::Scalar && m > 64) continue;  // minutes
        std::printf("%-7s %-5s m=%-3lld %8.1f\n", ops::isa_name(isa), dtype_name(dt).data(),
                    (long long)m, gflops(x.data(), m, w, y.data()));
      }
    }
  }
}
