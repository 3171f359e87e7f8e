// Micro-benchmark of ops::linear on FP4 (e2m1 codes + E8M0 scale per 32
// inputs) weights at DeepSeek V4 routed-expert shapes: decode (m = 1)
// weight stream in GB/s (0.5 byte a weight + 1/32 byte of scale) against
// the read probe (ops/roofline.h), the same shape as FP8 for comparison
// (1 byte a weight), and prefill (m = 64) GFLOP/s against the f32 FMA peak
// (the FP4 GEMM runs f32 tiles on dequantised weights). Each shape cycles
// through copies totalling ~384 MB so every call reads its weights from
// memory.
// Not wired into CMake; build against a build tree's libraries, e.g.
//   g++ -O2 -std=c++20 -fopenmp -Isrc bench/fp4_linear_bench.cpp \
//       build/libpagoda_ops.a build/libpagoda_core.a -lfmt -o /tmp/fp4_linear_bench
//   /tmp/fp4_linear_bench [threads] [seconds per shape]
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/parallel.h"
#include "ops/ops.h"
#include "ops/roofline.h"

using namespace pagoda;

namespace {

// Copies of one shape in a given format, each its own memory.
struct Copies {
  std::vector<std::vector<uint8_t>> bytes, scales;
  std::vector<float> fp8_scales;
  std::vector<ops::Matrix> m;
  int64_t bytes_per_call = 0;

  Copies(DType dtype, int64_t rows, int64_t cols, int64_t total_bytes) {
    const bool fp4 = dtype == DType::F4E2M1;
    const int64_t data = fp4 ? rows * ops::fp4_row_bytes(cols) : rows * cols;
    const int64_t scale = fp4 ? rows * ops::fp4_scale_cols(cols) : 0;
    bytes_per_call = data + scale;
    const int64_t copies = std::max<int64_t>(1, total_bytes / bytes_per_call);
    fp8_scales.assign(ops::fp8_scale_rows(rows) * ops::fp8_scale_cols(cols), 1e-3f);
    for (int64_t c = 0; c < copies; ++c) {
      std::vector<uint8_t> b(data), s(scale);
      for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>((i * 2654435761u + c) % 0x7e);
      for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<uint8_t>(118 + i % 8);
      bytes.push_back(std::move(b));
      scales.push_back(std::move(s));
    }
    for (size_t c = 0; c < bytes.size(); ++c) {
      ops::Matrix w{bytes[c].data(), dtype, rows, cols};
      if (fp4) {
        w.e8m0_scales = scales[c].data();
      } else {
        w.block_scales = fp8_scales.data();
      }
      m.push_back(w);
    }
  }
};

double seconds_per_call(const Copies& w, int64_t m, double seconds) {
  std::vector<float> x(m * w.m[0].cols, 0.01f), y(m * w.m[0].rows);
  int64_t calls = 0;
  const auto t0 = std::chrono::steady_clock::now();
  double sec = 0;
  while (sec < seconds) {
    ops::linear(x.data(), m, w.m[calls % w.m.size()], nullptr, y.data());
    ++calls;
    sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  return sec / calls;
}

}  // namespace

int main(int argc, char** argv) {
  set_num_threads(argc > 1 ? std::atoi(argv[1]) : 2);
  const double seconds = argc > 2 ? std::atof(argv[2]) : 1.0;
  const ops::Roofline roof = ops::measure_roofline(num_threads(), 0.3);
  std::printf("threads %d, isa %s, read probe %.1f GB/s, f32 peak %.1f GFLOP/s\n", num_threads(),
              ops::isa_name(ops::current_isa()), roof.read_gb_per_s, roof.fp32_gflops);
  // V4-Flash w1/w3 and w2, V4-Pro w1/w3 and w2 (logical [out, in]).
  const int64_t shapes[][2] = {{2048, 4096}, {4096, 2048}, {3072, 7168}, {7168, 3072}};
  for (const auto& s : shapes) {
    const int64_t rows = s[0], cols = s[1];
    const Copies w(DType::F4E2M1, rows, cols, int64_t{384} << 20);
    for (int64_t m : {int64_t{1}, int64_t{64}}) {
      const double per = seconds_per_call(w, m, seconds);
      if (m == 1) {
        const double gbs = w.bytes_per_call / per * 1e-9;
        const Copies f8(DType::F8E4M3, rows, cols, int64_t{384} << 20);
        const double per_fp8 = seconds_per_call(f8, 1, seconds);
        std::printf(
            "[%lld, %lld] m 1: fp4 %.3f ms, %.1f GB/s (%.0f%% of read probe), %.2f Gweights/s; "
            "fp8 %.3f ms (%.1f GB/s)\n",
            (long long)rows, (long long)cols, per * 1e3, gbs, 100 * gbs / roof.read_gb_per_s,
            rows * cols / per * 1e-9, per_fp8 * 1e3, f8.bytes_per_call / per_fp8 * 1e-9);
      } else {
        const double gflops = 2.0 * rows * cols * m / per * 1e-9;
        std::printf("[%lld, %lld] m %lld: %.2f ms, %.1f GFLOP/s (%.0f%% of f32 peak)\n",
                    (long long)rows, (long long)cols, (long long)m, per * 1e3, gflops,
                    roof.fp32_gflops > 0 ? 100 * gflops / roof.fp32_gflops : 0.0);
      }
    }
  }
}
