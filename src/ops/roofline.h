// What this machine can do at most, measured with our own loops: read
// bandwidth from memory and peak arithmetic throughput (f32 FMA, bf16 dot
// products, int8 dot products). `pagoda bench roofline` prints these, and
// `pagoda bench latency` compares the engine against them.
#pragma once

#include <cstdint>

namespace pagoda::ops {

enum class PeakKind { Fp32Fma, Bf16Dot, Int8Dot };
const char* peak_kind_name(PeakKind kind);
// Whether this CPU has the instruction behind a kind (AVX-512 FMA,
// AVX512_BF16 vdpbf16ps, AVX512_VNNI vpdpbusd).
bool peak_supported(PeakKind kind);

// Runs a register-only loop of `iters` iterations of the kind's instruction
// on the calling thread; returns the arithmetic operations done (a
// multiply-add counts 2). The value is never 0 for a supported kind.
double run_peak_loop(PeakKind kind, int64_t iters);

// Sums x[0..n) with wide loads (the read-bandwidth probe). Returns the sum
// so the reads cannot be optimized away.
float read_sum(const float* x, int64_t n);

struct Roofline {
  int threads = 1;
  double read_gb_per_s = 0;
  double fp32_gflops = 0;  // 0: not supported
  double bf16_gflops = 0;
  double int8_gops = 0;
};

// Measures every figure on `threads` kernel threads, spending about
// `seconds` on each; `read_bytes` is the size of the buffer streamed
// (far larger than the caches).
Roofline measure_roofline(int threads, double seconds = 0.3, int64_t read_bytes = int64_t{1} << 29);

}  // namespace pagoda::ops
