// What this machine can do at most, measured with our own loops: read
// bandwidth from memory and peak arithmetic throughput (f32 FMA, bf16 dot
// products, int8 dot products). `pagoda bench roofline` prints these, and
// `pagoda bench latency` / `bench throughput` compare the engine against
// them.
//
// A peak is that of the instructions the selected ISA's kernels run for
// it on this CPU (peak_probe): on an AVX2-only CPU, or under --isa avx2,
// bf16 is "widen to f32 + 256-bit FMA" and int8 "vpmaddubsw + vpmaddwd"
// (or AVX-VNNI's vpdpbusd), never 0.
#pragma once

#include <cstdint>
#include <memory>

#include "core/meminfo.h"
#include "ops/ops.h"

namespace pagoda::ops {

enum class PeakKind { Fp32Fma, Bf16Dot, Int8Dot };
const char* peak_kind_name(PeakKind kind);

// One probe: a register-only loop of the instruction mix a kernel family
// runs, in independent chains. loop(iters) returns the arithmetic
// operations done (a multiply-add counts 2), never 0.
struct PeakProbe {
  const char* name;  // e.g. "avx2 bf16 widen + fma"
  double (*loop)(int64_t iters);
};

// The probe of `kind` for the kernels `isa` runs on this CPU (isa must be
// supported): f32 FMA of the ISA's vector width; bf16 with vdpbf16ps on
// avx512bf16, widened to f32 + FMA elsewhere (the kernels' way); int8 with
// the quant kernel table's instruction (AVX-512 VNNI, AVX-VNNI, or AVX2's
// vpmaddubsw + vpmaddwd); scalar: the compiler's baseline code.
PeakProbe peak_probe(PeakKind kind, Isa isa);

// The selected ISA's probe of `kind` run for `iters` iterations on the
// calling thread.
double run_peak_loop(PeakKind kind, int64_t iters);

// The selected ISA's probe of `kind` per second of the calling thread's CPU
// time (best of 5 runs of ~0.05 s): what one kernel thread does per second
// it runs, which other processes on a shared host do not change. Judges
// figures taken on the CPU clock (bench latency's *_cpu_clock fractions).
double peak_per_cpu_second(PeakKind kind);

// Sums x[0..n) with wide loads (the read-bandwidth probe). Returns the sum
// so the reads cannot be optimized away.
float read_sum(const float* x, int64_t n);

// The read-bandwidth probe as an object, to be run again and again between
// the steps of a timed run (bench latency probes before every decode step,
// so a step and the bandwidth it is judged by see the same machine state on
// a shared host). Holds a buffer of `bytes` (the stream a decode step reads:
// size it like the weights, far beyond the caches), first touched on the
// kernel threads that will read it.
class ReadProbe {
 public:
  explicit ReadProbe(int64_t bytes);
  // Streams the whole buffer once on every kernel thread (num_threads());
  // returns the bytes per second of that one pass.
  double measure();
  int64_t bytes() const { return n_ * static_cast<int64_t>(sizeof(float)); }

 private:
  int64_t n_;
  HugePageBuffer memory_;  // the pages streamed weights get (models/weights.cpp)
  float* buf_;
  float sink_ = 0;  // the sums, so the reads cannot be optimized away
};

struct Roofline {
  int threads = 1;
  Isa isa = Isa::Scalar;  // whose kernels the peaks are for
  double read_gb_per_s = 0;
  double fp32_gflops = 0;
  double bf16_gflops = 0;
  double int8_gops = 0;
  const char* fp32_probe = "";
  const char* bf16_probe = "";
  const char* int8_probe = "";
};

// Measures every figure on `threads` kernel threads for the selected ISA
// (current_isa()), spending about `seconds` on each; `read_bytes` is the
// size of the buffer streamed (far larger than the caches).
Roofline measure_roofline(int threads, double seconds = 0.3, int64_t read_bytes = int64_t{1} << 29);

}  // namespace pagoda::ops
