// Micro-benchmark of the routed-experts step (ops/moe.h): moe_route over
// random router logits, then moe_experts_forward, for a decode step (a
// few tokens) or a prefill chunk, with DeepSeek V3's expert shape (hidden
// 7168, moe_intermediate 2048) and fewer experts. Prints ms per step, the
// weight bytes of the experts the step used (only those are read) per
// second against the read roofline, and GFLOP/s against the f32 FMA (or
// bf16 dot) roofline (ops/roofline.h).
// Not wired into CMake; build against a build tree's libraries, e.g.
//   g++ -O2 -std=c++20 -fopenmp -Isrc bench/moe_bench.cpp \
//       build/libpagoda_ops.a build/libpagoda_core.a -lfmt -o /tmp/moe_bench
//   /tmp/moe_bench [tokens] [experts] [top_k] [bf16|f32] [threads] [hidden] [inter]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/parallel.h"
#include "ops/moe.h"
#include "ops/ops.h"
#include "ops/roofline.h"

using namespace pagoda;

int main(int argc, char** argv) {
  const int T = argc > 1 ? std::atoi(argv[1]) : 1;
  const int E = argc > 2 ? std::atoi(argv[2]) : 16;
  const int k = argc > 3 ? std::atoi(argv[3]) : 8;
  const bool bf16 = argc > 4 ? std::string(argv[4]) != "f32" : true;
  const int threads = argc > 5 ? std::atoi(argv[5]) : 2;
  const int64_t H = argc > 6 ? std::atoll(argv[6]) : 7168;
  const int64_t I = argc > 7 ? std::atoll(argv[7]) : 2048;
  set_num_threads(threads);
  const size_t esize = bf16 ? 2 : 4;
  const DType dt = bf16 ? DType::BF16 : DType::F32;
  // One buffer per matrix, small random values (bf16 or f32 bit patterns).
  std::mt19937 rng(0);
  std::vector<std::vector<uint8_t>> storage(size_t(E) * 3);
  std::vector<ops::MoeExpert> experts(E);
  for (int e = 0; e < E; ++e) {
    for (int m = 0; m < 3; ++m) {
      auto& buf = storage[e * 3 + m];
      buf.resize(size_t(H * I) * esize);
      for (size_t i = 0; i + 1 < buf.size(); i += 2) {
        const uint16_t b = 0x3c00 + (rng() & 0x3ff);
        std::memcpy(&buf[i], &b, 2);
      }
    }
    experts[e].gate = {storage[e * 3].data(), dt, I, H};
    experts[e].up = {storage[e * 3 + 1].data(), dt, I, H};
    experts[e].down = {storage[e * 3 + 2].data(), dt, H, I};
  }
  std::normal_distribution<float> d;
  std::vector<float> x(size_t(T) * H), logits(size_t(T) * E), out(x.size());
  for (float& v : x) v = d(rng);
  for (float& v : logits) v = d(rng);
  ops::MoeRouting r;
  r.num_experts = E;
  r.top_k = k;
  r.n_group = E % 8 == 0 && E / 8 >= 2 && E / 8 * 4 >= k ? 8 : 1;  // V3: 8 groups
  r.topk_group = r.n_group == 8 ? 4 : 1;
  r.routed_scaling_factor = 2.5f;
  std::vector<int32_t> ids(size_t(T) * k);
  std::vector<float> w(ids.size());
  ops::moe_route(logits.data(), T, r, ids.data(), w.data());
  const std::set<int32_t> used(ids.begin(), ids.end());
  ops::MoeScratch scratch;
  auto run = [&] {
    ops::moe_route(logits.data(), T, r, ids.data(), w.data());
    ops::moe_experts_forward(x.data(), T, ids.data(), w.data(), k, experts.data(), E, scratch,
                             out.data());
  };
  run();
  int reps = 1;
  double s = 0;
  for (;;) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) run();
    s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 1.0) break;
    reps *= 2;
  }
  const double per = s / reps;
  const double bytes = double(used.size()) * 3 * H * I * esize;
  const double flops = 2.0 * 3 * H * I * T * k;
  const ops::Roofline roof = ops::measure_roofline(threads);
  const double peak = bf16 && roof.bf16_gflops > 0 ? roof.bf16_gflops : roof.fp32_gflops;
  std::printf(
      "MoE step: %d tokens, top-%d of %d experts (%zu used), hidden %lld inter %lld %s, %d "
      "threads: %.3f ms; expert weights %.1f GB/s (read roofline %.1f, %.0f%%); %.1f GFLOP/s "
      "(%s roofline %.1f, %.0f%%) (checksum %g)\n",
      T, k, E, used.size(), static_cast<long long>(H), static_cast<long long>(I),
      bf16 ? "bf16" : "f32", threads, per * 1e3, bytes / per * 1e-9, roof.read_gb_per_s,
      100 * bytes / per * 1e-9 / roof.read_gb_per_s, flops / per * 1e-9,
      bf16 && roof.bf16_gflops > 0 ? "bf16 dot" : "f32 FMA", peak, 100 * flops / per * 1e-9 / peak,
      static_cast<double>(out[0] + out[out.size() - 1]));
}
