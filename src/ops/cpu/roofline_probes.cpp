// The probe loops behind ops/roofline.h: independent accumulator chains of
// one instruction, enough of them to cover its latency on every port.
#include <immintrin.h>

#include <cstdint>

#include "ops/roofline.h"

namespace pagoda::ops {

namespace {

constexpr int kChains = 12;

#define PAGODA_AVX512 __attribute__((target("avx512f")))
#define PAGODA_AVX512BF16 __attribute__((target("avx512f,avx512bf16")))
#define PAGODA_AVX512VNNI __attribute__((target("avx512f,avx512vnni")))

// Horizontal sums through memory (GCC 12's reduce intrinsics trip
// -Wuninitialized).
PAGODA_AVX512 float hsum(const __m512& v) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, v);
  float s = 0;
  for (float x : lanes) s += x;
  return s;
}

// In int64: the int8 probe's lanes wrap around over a long run and their
// int32 sum would overflow (undefined behaviour, caught by UBSan).
PAGODA_AVX512 int64_t hsum(const __m512i& v) {
  alignas(64) int32_t lanes[16];
  _mm512_store_si512(lanes, v);
  int64_t s = 0;
  for (int32_t x : lanes) s += x;
  return s;
}

// Distinct starting values of the chains, and folding two of them.
PAGODA_AVX512 void chain_start(__m512& x, int c) { x = _mm512_set1_ps(static_cast<float>(c)); }
PAGODA_AVX512 void chain_start(__m512i& x, int c) { x = _mm512_set1_epi32(c); }
PAGODA_AVX512 void chain_fold(__m512& s, const __m512& x) { s = _mm512_add_ps(s, x); }
PAGODA_AVX512 void chain_fold(__m512i& s, const __m512i& x) { s = _mm512_add_epi32(s, x); }

// kChains accumulators of type Acc, each advanced `iters` times by
// step(acc); returns the horizontal sum of them all (used, so that the
// loop is not optimized away). This template has no target attribute: the
// step lambda carries its instruction's, and the probes are `flatten` so
// that everything inlines into their ISA-targeted body instead of being
// called once per instruction. Vectors go by reference, as a by-value one
// in untargeted code changes the ABI.
template <class Acc, class Step>
inline auto run_chains(int64_t iters, Step step) {
  Acc acc[kChains];
  for (int c = 0; c < kChains; ++c) chain_start(acc[c], c);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) step(acc[c]);
  }
  for (int c = 1; c < kChains; ++c) chain_fold(acc[0], acc[c]);
  return hsum(acc[0]);
}

PAGODA_AVX512 __attribute__((flatten)) double fp32_loop(int64_t iters) {
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-3f);
  const float sum =
      run_chains<__m512>(iters, [&](__m512& x) PAGODA_AVX512 { x = _mm512_fmadd_ps(x, a, b); });
  return sum != 0.0f ? 2.0 * 16 * kChains * static_cast<double>(iters) : -1;
}

PAGODA_AVX512BF16 __attribute__((flatten)) double bf16_loop(int64_t iters) {
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80);  // 1.0
  const __m512bh b = (__m512bh)_mm512_set1_epi16(0x3a83);  // ~1e-3
  const float sum = run_chains<__m512>(
      iters, [&](__m512& x) PAGODA_AVX512BF16 { x = _mm512_dpbf16_ps(x, a, b); });
  return sum != 0.0f ? 2.0 * 32 * kChains * static_cast<double>(iters) : -1;
}

PAGODA_AVX512VNNI __attribute__((flatten)) double int8_loop(int64_t iters) {
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-1);
  const int64_t sum = run_chains<__m512i>(
      iters, [&](__m512i& x) PAGODA_AVX512VNNI { x = _mm512_dpbusd_epi32(x, a, b); });
  return sum != 1 ? 2.0 * 64 * kChains * static_cast<double>(iters) : -1;
}

PAGODA_AVX512 float read_sum_avx512(const float* x, int64_t n) {
  __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    // Ask for lines 4 KiB ahead as the GEMV kernels do, so the probe reads
    // at least as fast as the best kernel streams weights.
    __builtin_prefetch(x + i + 1024, 0, 0);
    __builtin_prefetch(x + i + 1040, 0, 0);
    __builtin_prefetch(x + i + 1056, 0, 0);
    __builtin_prefetch(x + i + 1072, 0, 0);
    s0 = _mm512_add_ps(s0, _mm512_loadu_ps(x + i));
    s1 = _mm512_add_ps(s1, _mm512_loadu_ps(x + i + 16));
    s2 = _mm512_add_ps(s2, _mm512_loadu_ps(x + i + 32));
    s3 = _mm512_add_ps(s3, _mm512_loadu_ps(x + i + 48));
  }
  float s = hsum(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
  for (; i < n; ++i) s += x[i];
  return s;
}

__attribute__((target("avx2"))) float read_sum_avx2(const float* x, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __builtin_prefetch(x + i + 1024, 0, 0);  // as read_sum_avx512
    __builtin_prefetch(x + i + 1040, 0, 0);
    s0 = _mm256_add_ps(s0, _mm256_loadu_ps(x + i));
    s1 = _mm256_add_ps(s1, _mm256_loadu_ps(x + i + 8));
    s2 = _mm256_add_ps(s2, _mm256_loadu_ps(x + i + 16));
    s3 = _mm256_add_ps(s3, _mm256_loadu_ps(x + i + 24));
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
  float s = 0;
  for (float v : lanes) s += v;
  for (; i < n; ++i) s += x[i];
  return s;
}

}  // namespace

const char* peak_kind_name(PeakKind kind) {
  switch (kind) {
    case PeakKind::Fp32Fma:
      return "fp32_fma";
    case PeakKind::Bf16Dot:
      return "bf16_dot";
    case PeakKind::Int8Dot:
      return "int8_dot";
  }
  return "?";
}

bool peak_supported(PeakKind kind) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512f")) return false;
  switch (kind) {
    case PeakKind::Fp32Fma:
      return true;
    case PeakKind::Bf16Dot:
      return __builtin_cpu_supports("avx512bf16");
    case PeakKind::Int8Dot:
      return __builtin_cpu_supports("avx512vnni");
  }
  return false;
}

double run_peak_loop(PeakKind kind, int64_t iters) {
  if (!peak_supported(kind)) return 0;
  switch (kind) {
    case PeakKind::Fp32Fma:
      return fp32_loop(iters);
    case PeakKind::Bf16Dot:
      return bf16_loop(iters);
    case PeakKind::Int8Dot:
      return int8_loop(iters);
  }
  return 0;
}

float read_sum(const float* x, int64_t n) {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return read_sum_avx512(x, n);
  if (__builtin_cpu_supports("avx2")) return read_sum_avx2(x, n);
  float s = 0;
  for (int64_t i = 0; i < n; ++i) s += x[i];
  return s;
}

}  // namespace pagoda::ops
