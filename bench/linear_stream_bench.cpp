// Micro-benchmark of the linears of a decode step as the engine runs them:
// Qwen3-0.6B's 28 layers of packed bf16 (or int8, --quantization int8's
// panels) weights (q/k/v fused, o, gate/up fused, down) and the 151936-row
// LM head, 1.19 GB in all (0.60 GB int8), so every step streams them from
// memory. The packed matrices lie one after another in huge pages, as the
// engine's WeightStore lays them out. Prints, per pass of `steps` steps,
// the weight stream in GB/s (m = 1) or GFLOP/s (m > 1) next to the read
// probe or the linears' peak, and the ratio. At m = 1 the read probe (a
// pass over a buffer the size of the weights) runs between the steps, as
// bench latency's does, and the ratio is of the medians.
// Not wired into CMake; build against a build tree's libraries, e.g.
//   g++ -O2 -std=c++20 -fopenmp -Isrc bench/linear_stream_bench.cpp build/libpagoda_models.a \
//       build/libpagoda_ops.a build/libpagoda_core.a -lfmt -o /tmp/linear_stream_bench
//   [STEPS=N] /tmp/linear_stream_bench [threads] [m] [passes] [bf16|int8] [isa]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <vector>

#include "core/dtype.h"
#include "core/meminfo.h"
#include "core/parallel.h"
#include "models/quantize.h"
#include "ops/ops.h"
#include "ops/packed.h"
#include "ops/roofline.h"

using namespace pagoda;

namespace {

bool g_int8 = false;  // the weights quantized to int8 panels (as the loader does)

void* aligned64(std::vector<uint8_t>& bytes) {
  return bytes.data() + (64 - reinterpret_cast<uintptr_t>(bytes.data()) % 64) % 64;
}

// The packed matrices are carved one after another, 64-byte aligned, from
// one huge-page buffer, as the engine's WeightStore carves them from its
// streamed slabs: the stream runs over huge pages and from one matrix into
// the next, as a decode step's does.
struct Arena {
  HugePageBuffer buffer;
  size_t used = 0;
  explicit Arena(size_t bytes) : buffer(bytes) {}
  void* take(size_t bytes) {
    used = (used + 63) / 64 * 64;
    if (!buffer.data() || used + bytes > buffer.size()) {
      std::fprintf(stderr, "linear_stream_bench: weight arena of %zu bytes too small or unmapped\n",
                   buffer.size());
      std::exit(1);
    }
    void* p = buffer.data() + used;
    used += bytes;
    return p;
  }
};
Arena* g_arena = nullptr;

// A packed bf16 (or int8) [rows, cols] matrix of small pseudo-random values.
struct PackedMatrix {
  ops::Matrix m;
  PackedMatrix(int64_t rows, int64_t cols) {
    std::vector<bf16_t> w(static_cast<size_t>(rows * cols));
    for (size_t i = 0; i < w.size(); ++i)
      w[i] = f32_to_bf16((i * 2654435761u % 1000) / 1e3f - 0.5f);
    const ops::Matrix src{w.data(), DType::BF16, rows, cols};
    if (g_int8) {
      std::vector<uint8_t> q(int8_matrix_bytes(rows, cols) + 64);
      const ops::Matrix qm = quantize_matrix_int8(src, aligned64(q));
      m = repack_int8(qm, g_arena->take(int8_matrix_bytes(rows, cols, true)));
      return;
    }
    m = ops::pack_matrix(src, g_arena->take(ops::packed_bytes(rows, cols, DType::BF16)));
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  set_num_threads(argc > 1 ? std::atoi(argv[1]) : 2);
  const int64_t m = argc > 2 ? std::atoll(argv[2]) : 1;
  const int passes = argc > 3 ? std::atoi(argv[3]) : 5;
  g_int8 = argc > 4 && std::string(argv[4]) == "int8";
  if (argc > 5) {
    for (ops::Isa isa : ops::kAllIsas)
      if (std::string(argv[5]) == ops::isa_name(isa)) ops::set_isa(isa);
  }
  const int64_t hidden = 1024, q = 2048, kv = 1024, inter = 3072, vocab = 151936, layers = 28;
  const double bf16_bytes =
      2.0 * (layers * (hidden * (q + 2 * kv) + q * hidden + 3 * hidden * inter) + vocab * hidden);
  const double weights = g_int8 ? bf16_bytes / 2 : bf16_bytes;
  Arena arena(static_cast<size_t>(bf16_bytes * 1.05) + (size_t{64} << 20));  // + int8 scales, alignment
  g_arena = &arena;
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
  // STEPS=N: steps per pass (a pass reports their median; 2 at m > 1 is a
  // mean of two, too noisy to compare kernels).
  const int steps = std::getenv("STEPS") ? std::max(1, std::atoi(std::getenv("STEPS")))
                                         : (m == 1 ? 10 : 2);
  std::printf("threads %d, m %lld, %s weights (%s kernels), %.2f GB per step\n", num_threads(),
              (long long)m, g_int8 ? "int8" : "bf16", ops::isa_name(ops::current_isa()),
              weights * 1e-9);
  ops::ReadProbe probe(static_cast<int64_t>(weights));
  for (int pass = 0; pass < passes; ++pass) {
    std::vector<double> step_s, head_s, read;
    for (int s = 0; s < steps; ++s) {
      read.push_back(probe.measure() * 1e-9);
      const auto t0 = std::chrono::steady_clock::now();
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
      const auto h0 = std::chrono::steady_clock::now();
      ops::linear(x.data(), m, head.m, nullptr, yh.data());
      head_s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - h0).count());
      step_s.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    const double sec = median(step_s);
    if (m == 1) {
      const double gbs = weights / sec * 1e-9, rd = median(read);
      const double head_gbs = (g_int8 ? 1.0 : 2.0) * vocab * hidden / median(head_s) * 1e-9;
      std::printf("%.2f ms/step: %.1f GB/s, read probe between the steps %.1f GB/s: %.1f%% "
                  "(the LM head alone %.1f GB/s: %.1f%%)\n",
                  sec * 1e3, gbs, rd, 100 * gbs / rd, head_gbs, 100 * head_gbs / rd);
    } else {
      const ops::Roofline roof = ops::measure_roofline(num_threads(), 0.2);
      const double peak = g_int8 ? roof.int8_gops : roof.bf16_gflops;
      const double gflops = 2 * weights / (g_int8 ? 1 : 2) * m / sec * 1e-9;  // 2 per weight per row
      std::printf("%.2f ms/step: %.1f GFLOP/s, %s peak %.1f: %.1f%%; %.1f GB/s, read probe "
                  "between the steps %.1f GB/s\n",
                  sec * 1e3, gflops, g_int8 ? "int8" : "bf16", peak, 100 * gflops / peak,
                  weights / sec * 1e-9, median(read));
    }
  }
}
