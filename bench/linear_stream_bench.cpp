// Micro-benchmark of the linears of a decode step as the engine runs them:
// Qwen3-0.6B's 28 layers of packed bf16 weights (q/k/v fused, o, gate/up
// fused, down) and the 151936-row LM head, 1.19 GB in all, so every step
// streams them from memory. Prints, per pass of `steps` steps, the weight
// stream in GB/s (m = 1) or GFLOP/s (m > 1) next to the read probe or bf16
// peak measured right after (ops/roofline.h), and the ratio.
// Not wired into CMake; build against a build tree's libraries, e.g.
//   g++ -O2 -std=c++20 -fopenmp -Isrc bench/linear_stream_bench.cpp \
//       build/libpagoda_ops.a build/libpagoda_core.a -lfmt -o /tmp/linear_stream_bench
//   /tmp/linear_stream_bench [threads] [m] [passes]
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <vector>

#include "core/dtype.h"
#include "core/parallel.h"
#include "ops/ops.h"
#include "ops/packed.h"
#include "ops/roofline.h"

using namespace pagoda;

namespace {

// A packed bf16 [rows, cols] matrix of small pseudo-random values.
struct PackedMatrix {
  std::vector<uint8_t> bytes;
  ops::Matrix m;
  PackedMatrix(int64_t rows, int64_t cols) {
    std::vector<bf16_t> w(static_cast<size_t>(rows * cols));
    for (size_t i = 0; i < w.size(); ++i)
      w[i] = f32_to_bf16((i * 2654435761u % 1000) / 1e3f - 0.5f);
    bytes.resize(ops::packed_bytes(rows, cols, DType::BF16) + 64);
    void* at = bytes.data() + (64 - reinterpret_cast<uintptr_t>(bytes.data()) % 64) % 64;
    m = ops::pack_matrix(ops::Matrix{w.data(), DType::BF16, rows, cols}, at);
  }
};

}  // namespace

int main(int argc, char** argv) {
  set_num_threads(argc > 1 ? std::atoi(argv[1]) : 2);
  const int64_t m = argc > 2 ? std::atoll(argv[2]) : 1;
  const int passes = argc > 3 ? std::atoi(argv[3]) : 5;
  const int64_t hidden = 1024, q = 2048, kv = 1024, inter = 3072, vocab = 151936, layers = 28;
  struct Layer {
    PackedMatrix q, k, v, o, gate, up, down;
  };
  std::deque<Layer> model;
  for (int64_t l = 0; l < layers; ++l) {
    model.push_back({{q, hidden},
                     {kv, hidden},
                     {kv, hidden},
                     {hidden, q},
                     {inter, hidden},
                     {inter, hidden},
                     {hidden, inter}});
  }
  const PackedMatrix head(vocab, hidden);
  std::vector<float> x(m * inter, 0.01f), yq(m * q), yk(m * kv), yv(m * kv), yo(m * hidden),
      ygu(m * 2 * inter), yd(m * hidden), yh(m * vocab);
  const double weights =
      2.0 * (layers * (hidden * (q + 2 * kv) + q * hidden + 3 * hidden * inter) + vocab * hidden);
  const int steps = m == 1 ? 10 : 2;
  std::printf("threads %d, m %lld, %.2f GB of weights per step\n", num_threads(), (long long)m,
              weights * 1e-9);
  for (int pass = 0; pass < passes; ++pass) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int s = 0; s < steps; ++s) {
      for (const Layer& l : model) {
        const ops::LinearOutput qkv[3] = {{&l.q.m, nullptr, yq.data()},
                                          {&l.k.m, nullptr, yk.data()},
                                          {&l.v.m, nullptr, yv.data()}};
        ops::linear_multi(x.data(), m, qkv, 3);
        ops::linear(x.data(), m, l.o.m, nullptr, yo.data());
        const ops::LinearOutput gate_up[2] = {{&l.gate.m, nullptr, ygu.data(), 2 * inter},
                                              {&l.up.m, nullptr, ygu.data() + inter, 2 * inter}};
        ops::linear_multi(x.data(), m, gate_up, 2);
        ops::linear(x.data(), m, l.down.m, nullptr, yd.data());
      }
      ops::linear(x.data(), m, head.m, nullptr, yh.data());
    }
    const double sec =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps;
    const ops::Roofline roof = ops::measure_roofline(num_threads(), 0.2);
    if (m == 1) {
      const double gbs = weights / sec * 1e-9;
      std::printf("%.2f ms/step: %.1f GB/s, read probe %.1f GB/s: %.1f%%\n", sec * 1e3, gbs,
                  roof.read_gb_per_s, 100 * gbs / roof.read_gb_per_s);
    } else {
      const double gflops = weights * m / sec * 1e-9;  // 2 FLOPs per 2-byte weight per row
      std::printf("%.2f ms/step: %.1f GFLOP/s, bf16 peak %.1f: %.1f%%\n", sec * 1e3, gflops,
                  roof.bf16_gflops, 100 * gflops / roof.bf16_gflops);
    }
  }
}
