// The probe loops behind ops/roofline.h: independent accumulator chains of
// one instruction, enough of them to cover its latency on every port.
#include <immintrin.h>

#include <cstdint>

#include "ops/roofline.h"

namespace pagoda::ops {

namespace {

constexpr int kChains = 12;

// Horizontal sums through memory (GCC 12's reduce intrinsics trip
// -Wuninitialized).
__attribute__((target("avx512f"))) float hsum(__m512 v) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, v);
  float s = 0;
  for (float x : lanes) s += x;
  return s;
}

__attribute__((target("avx512f"))) int32_t hsum(__m512i v) {
  alignas(64) int32_t lanes[16];
  _mm512_store_si512(lanes, v);
  int32_t s = 0;
  for (int32_t x : lanes) s += x;
  return s;
}

__attribute__((target("avx512f"))) double fp32_loop(int64_t iters) {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(static_cast<float>(c));
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-3f);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
  }
  __m512 s = acc[0];
  for (int c = 1; c < kChains; ++c) s = _mm512_add_ps(s, acc[c]);
  return hsum(s) != 0.0f ? 2.0 * 16 * kChains * static_cast<double>(iters) : -1;
}

__attribute__((target("avx512f,avx512bf16"))) double bf16_loop(int64_t iters) {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(static_cast<float>(c));
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80);  // 1.0
  const __m512bh b = (__m512bh)_mm512_set1_epi16(0x3a83);  // ~1e-3
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], a, b);
  }
  __m512 s = acc[0];
  for (int c = 1; c < kChains; ++c) s = _mm512_add_ps(s, acc[c]);
  return hsum(s) != 0.0f ? 2.0 * 32 * kChains * static_cast<double>(iters) : -1;
}

__attribute__((target("avx512f,avx512vnni"))) double int8_loop(int64_t iters) {
  __m512i acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_epi32(c);
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-1);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_dpbusd_epi32(acc[c], a, b);
  }
  __m512i s = acc[0];
  for (int c = 1; c < kChains; ++c) s = _mm512_add_epi32(s, acc[c]);
  return hsum(s) != 1 ? 2.0 * 64 * kChains * static_cast<double>(iters) : -1;
}

__attribute__((target("avx512f"))) float read_sum_avx512(const float* x, int64_t n) {
  __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
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
