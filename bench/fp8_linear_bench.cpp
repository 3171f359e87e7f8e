// Micro-benchmark of ops::linear on FP8 (e4m3 + 128x128 block scales)
// weights at DeepSeek V3 shapes: decode (m = 1) weight stream in GB/s
// against the read probe (ops/roofline.h), and prefill (m = 64) GFLOP/s
// against the f32 FMA peak (the FP8 GEMM runs f32 tiles on dequantised
// weights). Each shape cycles through copies totalling ~384 MB so every
// call reads its weights from memory.
// Not wired into CMake; build against a build tree's libraries, e.g.
//   g++ -O2 -std=c++20 -fopenmp -Isrc bench/fp8_linear_bench.cpp \
//       build/libpagoda_ops.a build/libpagoda_core.a -lfmt -o /tmp/fp8_linear_bench
//   /tmp/fp8_linear_bench [threads] [seconds per shape]
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/parallel.h"
#include "ops/ops.h"
#include "ops/packed.h"
#include "ops/roofline.h"

using namespace pagoda;

namespace {

struct Fp8Copies {
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<float> scales;
  std::vector<ops::Matrix> m;
  Fp8Copies(int64_t rows, int64_t cols, int64_t total_bytes) {
    const int64_t copies = std::max<int64_t>(1, total_bytes / (rows * cols));
    scales.assign(ops::fp8_scale_rows(rows) * ops::fp8_scale_cols(cols), 1e-3f);
    for (int64_t c = 0; c < copies; ++c) {
      std::vector<uint8_t> b(rows * cols);
      for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>((i * 2654435761u + c) % 0x7e);
      bytes.push_back(std::move(b));
    }
    for (auto& b : bytes) {
      ops::Matrix w{b.data(), DType::F8E4M3, rows, cols};
      w.block_scales = scales.data();
      m.push_back(w);
    }
  }
};

// The same shape as packed bf16 (what the engine decodes a bf16 checkpoint
// with on AVX512_BF16, row-major elsewhere): the baseline FP8 should beat
// by reading half the bytes.
struct Bf16Copies {
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<ops::Matrix> m;
  Bf16Copies(int64_t rows, int64_t cols, int64_t total_bytes) {
    const int64_t copies = std::max<int64_t>(1, total_bytes / (2 * rows * cols));
    std::vector<uint16_t> w(rows * cols);
    for (size_t i = 0; i < w.size(); ++i) w[i] = f32_to_bf16((i * 2654435761u % 1000) / 1e6f);
    const ops::Matrix src{w.data(), DType::BF16, rows, cols};
    const bool pack = ops::packed_bf16_is_native();
    for (int64_t c = 0; c < copies; ++c) {
      bytes.emplace_back((pack ? ops::packed_bytes(rows, cols, DType::BF16) : 2 * w.size()) + 64);
      uint8_t* at = bytes.back().data();
      at += (64 - reinterpret_cast<uintptr_t>(at) % 64) % 64;
      if (pack) {
        m.push_back(ops::pack_matrix(src, at));
      } else {
        std::memcpy(at, w.data(), 2 * w.size());
        m.push_back({at, DType::BF16, rows, cols});
      }
    }
  }
};

template <typename Copies>
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
  const int64_t shapes[][2] = {{24576, 1536}, {576, 7168}, {7168, 16384}, {2048, 7168}};
  for (const auto& s : shapes) {
    const int64_t rows = s[0], cols = s[1];
    const Fp8Copies w(rows, cols, int64_t{384} << 20);
    for (int64_t m : {int64_t{1}, int64_t{64}}) {
      const double per = seconds_per_call(w, m, seconds);
      if (m == 1) {
        const double gbs = rows * cols / per * 1e-9;
        const Bf16Copies b(rows, cols, int64_t{384} << 20);
        const double per_bf16 = seconds_per_call(b, 1, seconds);
        std::printf(
            "[%lld, %lld] m 1: %.3f ms, %.1f GB/s (%.0f%% of read probe); bf16 %.3f ms (%.1f GB/s)\n",
            (long long)rows, (long long)cols, per * 1e3, gbs, 100 * gbs / roof.read_gb_per_s,
            per_bf16 * 1e3, 2.0 * rows * cols / per_bf16 * 1e-9);
      } else {
        const double gflops = 2.0 * rows * cols * m / per * 1e-9;
        std::printf("[%lld, %lld] m %lld: %.2f ms, %.1f GFLOP/s (%.0f%% of f32 peak)\n",
                    (long long)rows, (long long)cols, (long long)m, per * 1e3, gflops,
                    roof.fp32_gflops > 0 ? 100 * gflops / roof.fp32_gflops : 0.0);
      }
    }
  }
}
