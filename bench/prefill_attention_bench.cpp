// Micro-benchmark of ops::paged_attention in prefill: one chunk of `chunk`
// new tokens at the end of a `context`-token prompt (the costliest chunk of
// a chunked prefill), Qwen3-0.6B's shape (16 q / 8 kv heads, head_dim 128,
// blocks of 16 in shuffled order), bf16 cache; the flash path
// (ops::flash_attention_enabled) and the f32 path in interleaved rounds.
// Prints ms per layer and GFLOP/s (q.k and p.v, 2 FLOPs a multiply-add,
// over each row's causal keys) against the bf16 dot-product peak measured
// in the same run.
// Not wired into CMake; build against a build tree's libraries, e.g.
//   g++ -O2 -std=c++20 -fopenmp -Isrc bench/prefill_attention_bench.cpp \
//       build/libpagoda_ops.a build/libpagoda_core.a -lfmt -o /tmp/prefill_attention_bench
//   /tmp/prefill_attention_bench [context] [chunk] [threads] [rounds]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <numeric>
#include <random>
#include <tuple>
#include <vector>

#include "core/dtype.h"
#include "core/parallel.h"
#include "ops/ops.h"
#include "ops/roofline.h"

using namespace pagoda;

int main(int argc, char** argv) {
  const int context = argc > 1 ? std::atoi(argv[1]) : 8192;
  const int chunk = argc > 2 ? std::min(std::atoi(argv[2]), context) : 2048;
  set_num_threads(argc > 3 ? std::atoi(argv[3]) : 2);
  const int rounds = argc > 4 ? std::max(1, std::atoi(argv[4])) : 3;
  const int q_heads = 16, kv_heads = 8, hd = 128, bs = 16;
  const ops::KVLayout layout{bs, kv_heads, hd, DType::BF16};
  const int blocks = (context + bs - 1) / bs;
  const size_t elems = static_cast<size_t>(blocks) * kv_heads * bs * hd;
  std::mt19937 rng(0);
  std::normal_distribution<float> normal;
  std::vector<uint16_t> k(elems), v(elems);
  for (auto& x : k) x = f32_to_bf16(normal(rng));
  for (auto& x : v) x = f32_to_bf16(normal(rng));
  std::vector<int32_t> table(blocks);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  const int32_t qsl[2] = {0, chunk}, len = context;
  std::vector<float> q(static_cast<size_t>(chunk) * q_heads * hd), out(q.size());
  for (float& x : q) x = normal(rng);
  const ops::AttentionBatch b{1, qsl, &len, table.data(), blocks, 0};
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  // Row j of the chunk sees context - chunk + j + 1 keys.
  const double n = chunk, keys = n * (context - chunk) + n * (n + 1) / 2;
  const double flops = 4.0 * q_heads * hd * keys;
  const ops::Roofline roof = ops::measure_roofline(num_threads(), 0.25, int64_t{1} << 26);
  // The process's CPU time too: on a shared host the wall time includes
  // the time other processes held the cores; GFLOP per CPU-second over the
  // thread count is what the kernel does while it runs.
  auto cpu_now = [] {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  };
  double cpu_s = 0;
  auto time_once = [&](bool flash) {
    ops::set_flash_attention(flash);
    const double c0 = cpu_now();
    const auto t0 = std::chrono::steady_clock::now();
    ops::paged_attention(q.data(), k.data(), v.data(), layout, b, q_heads, scale, out.data());
    cpu_s = cpu_now() - c0;
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  time_once(true);
  time_once(false);
  std::vector<double> flash_s, f32_s, flash_cpu, f32_cpu;
  for (int r = 0; r < rounds; ++r) {
    flash_s.push_back(time_once(true));
    flash_cpu.push_back(cpu_s / num_threads());
    f32_s.push_back(time_once(false));
    f32_cpu.push_back(cpu_s / num_threads());
  }
  for (auto* v : {&flash_s, &f32_s, &flash_cpu, &f32_cpu}) std::sort(v->begin(), v->end());
  std::printf("chunk %d at context %d, %d threads, bf16 peak %.0f GFLOP/s, fp32 %.0f\n", chunk,
              context, num_threads(), roof.bf16_gflops, roof.fp32_gflops);
  for (auto [name, s, c] :
       {std::tuple{"flash", flash_s[0], flash_cpu[0]}, std::tuple{"f32  ", f32_s[0], f32_cpu[0]}}) {
    const double gf = flops / s * 1e-9, gf_cpu = flops / c * 1e-9;
    std::printf(
        "%s: %.1f ms per layer (best of %d), %.0f GFLOP/s = %.1f%% of bf16 peak; per "
        "CPU-second of a thread %.0f GFLOP/s = %.1f%%\n",
        name, s * 1e3, rounds, gf, 100 * gf / roof.bf16_gflops, gf_cpu,
        100 * gf_cpu / roof.bf16_gflops);
  }
}
