// The probe loops behind ops/roofline.h: independent accumulator chains of
// the instruction mix each kernel family runs, enough of them to cover its
// latency on every port; one set per ISA, and peak_probe's choice of the
// one the selected kernels use.
#include <immintrin.h>

#include <cstdint>

#include "ops/roofline.h"

namespace pagoda::ops {

namespace {

constexpr int kChains = 12;

#define PAGODA_AVX512 __attribute__((target("avx512f")))
#define PAGODA_AVX512BF16 __attribute__((target("avx512f,avx512bf16")))
#define PAGODA_AVX512VNNI __attribute__((target("avx512f,avx512vnni")))
#define PAGODA_AVX2 __attribute__((target("avx2,fma")))
#define PAGODA_AVXVNNI __attribute__((target("avx2,fma,avxvnni")))

// Hides a value from the optimizer (no instruction): an operation on it
// cannot be hoisted out of the loop or shared between chains.
// (The 256- and 512-bit overloads carry their target: clang allocates a
// ymm/zmm register for an asm operand only inside such a function.)
template <class V>
inline void opaque(V& v) {
  __asm__ volatile("" : "+x"(v));
}
PAGODA_AVX2 inline void opaque(__m256i& v) { __asm__ volatile("" : "+x"(v)); }
PAGODA_AVX512 inline void opaque(__m512i& v) { __asm__ volatile("" : "+v"(v)); }

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

PAGODA_AVX2 float hsum(const __m256& v) {
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, v);
  float s = 0;
  for (float x : lanes) s += x;
  return s;
}

// The 256-bit int8 chains as GCC's plain vector type: __m256i is
// may_alias, and GCC 12 then kept some of the chains in memory (a store
// per step, which capped the probe below the kernels).
typedef int32_t Int32x8 __attribute__((vector_size(32)));

PAGODA_AVX2 int64_t hsum(const Int32x8& v) {
  int64_t s = 0;
  for (int i = 0; i < 8; ++i) s += v[i];
  return s;
}

// Distinct starting values of the chains, and folding two of them.
PAGODA_AVX512 void chain_start(__m512& x, int c) { x = _mm512_set1_ps(static_cast<float>(c)); }
PAGODA_AVX512 void chain_start(__m512i& x, int c) { x = _mm512_set1_epi32(c); }
PAGODA_AVX512 void chain_fold(__m512& s, const __m512& x) { s = _mm512_add_ps(s, x); }
PAGODA_AVX512 void chain_fold(__m512i& s, const __m512i& x) { s = _mm512_add_epi32(s, x); }
PAGODA_AVX2 void chain_start(__m256& x, int c) { x = _mm256_set1_ps(static_cast<float>(c)); }
PAGODA_AVX2 void chain_start(Int32x8& x, int c) { x = Int32x8{} + c; }
PAGODA_AVX2 void chain_fold(__m256& s, const __m256& x) { s = _mm256_add_ps(s, x); }
PAGODA_AVX2 void chain_fold(Int32x8& s, const Int32x8& x) { s += x; }

// kChains accumulators of type Acc, each advanced `iters` times by
// step(acc); returns the horizontal sum of them all (used, so that the
// loop is not optimized away). This template has no target attribute: the
// step lambda carries its instruction's, and the probes are `flatten` so
// that everything inlines into their ISA-targeted body instead of being
// called once per instruction. Vectors go by reference, as a by-value one
// in untargeted code changes the ABI.
// Chains: kChains, or fewer where registers are short.
template <class Acc, int Chains = kChains, class Step>
inline auto run_chains(int64_t iters, Step step) {
  Acc acc[Chains];
  for (int c = 0; c < Chains; ++c) chain_start(acc[c], c);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int c = 0; c < Chains; ++c) step(acc[c]);
  }
  for (int c = 1; c < Chains; ++c) chain_fold(acc[0], acc[c]);
  return hsum(acc[0]);
}

// 10: the vpmaddubsw probe's 3 constants and a temporary leave no room
// for 12 chains in 16 ymm registers.
constexpr int kInt8Ymm = 10;

// ---- AVX-512 -------------------------------------------------------------
PAGODA_AVX512 __attribute__((flatten)) double fp32_avx512(int64_t iters) {
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-3f);
  const float sum =
      run_chains<__m512>(iters, [&](__m512& x) PAGODA_AVX512 { x = _mm512_fmadd_ps(x, a, b); });
  return sum != 0.0f ? 2.0 * 16 * kChains * static_cast<double>(iters) : -1;
}

PAGODA_AVX512BF16 __attribute__((flatten)) double bf16_dot_avx512(int64_t iters) {
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80);  // 1.0
  const __m512bh b = (__m512bh)_mm512_set1_epi16(0x3a83);  // ~1e-3
  const float sum = run_chains<__m512>(
      iters, [&](__m512& x) PAGODA_AVX512BF16 { x = _mm512_dpbf16_ps(x, a, b); });
  return sum != 0.0f ? 2.0 * 32 * kChains * static_cast<double>(iters) : -1;
}

PAGODA_AVX512VNNI __attribute__((flatten)) double int8_vnni_avx512(int64_t iters) {
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-1);
  const int64_t sum = run_chains<__m512i>(
      iters, [&](__m512i& x) PAGODA_AVX512VNNI { x = _mm512_dpbusd_epi32(x, a, b); });
  return sum != 1 ? 2.0 * 64 * kChains * static_cast<double>(iters) : -1;
}

// bf16 weights widened to f32 in registers, then FMAs: per weight vector
// one widening (shift or mask of a word holding two bf16) feeds kWidenRows
// rows' FMAs, the ratio of the kernels' register tiles.
constexpr int kWidenRows = 4;

PAGODA_AVX512 __attribute__((flatten)) double bf16_widen_avx512(int64_t iters) {
  __m512i w = _mm512_set1_epi32(0x3f803a83);
  const __m512 x = _mm512_set1_ps(1e-3f);
  const float sum = run_chains<__m512>(iters / kWidenRows, [&](__m512& acc) PAGODA_AVX512 {
    opaque(w);
    // maskz: GCC 12's unmasked form trips -Wmaybe-uninitialized (vec_avx512.h).
    const __m512 even = _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, w, 16));
#pragma GCC unroll 4
    for (int r = 0; r < kWidenRows; ++r) acc = _mm512_fmadd_ps(x, even, acc);
  });
  return sum != 0.0f ? 2.0 * 16 * kChains * kWidenRows * static_cast<double>(iters / kWidenRows)
                     : -1;
}

// ---- AVX2 ----------------------------------------------------------------
PAGODA_AVX2 __attribute__((flatten)) double fp32_avx2(int64_t iters) {
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(1e-3f);
  const float sum =
      run_chains<__m256>(iters, [&](__m256& x) PAGODA_AVX2 { x = _mm256_fmadd_ps(x, a, b); });
  return sum != 0.0f ? 2.0 * 8 * kChains * static_cast<double>(iters) : -1;
}

PAGODA_AVX2 __attribute__((flatten)) double bf16_widen_avx2(int64_t iters) {
  __m256i w = _mm256_set1_epi32(0x3f803a83);
  const __m256 x = _mm256_set1_ps(1e-3f);
  const float sum = run_chains<__m256>(iters / kWidenRows, [&](__m256& acc) PAGODA_AVX2 {
    opaque(w);
    const __m256 even = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
#pragma GCC unroll 4
    for (int r = 0; r < kWidenRows; ++r) acc = _mm256_fmadd_ps(x, even, acc);
  });
  return sum != 0.0f ? 2.0 * 8 * kChains * kWidenRows * static_cast<double>(iters / kWidenRows)
                     : -1;
}

// vpmaddubsw takes |w| (unsigned) and sign(w) * x (signed), as the AVX2
// int8 kernels do (quant_avx2.cpp): sign, multiply-add pairs to int16,
// multiply-add pairs of those to int32 (by ones), add into the chain.
PAGODA_AVX2 __attribute__((flatten)) double int8_maddubs_avx2(int64_t iters) {
  __m256i x = _mm256_set1_epi8(3);
  const __m256i w = _mm256_set1_epi8(-2), abs_w = _mm256_abs_epi8(w);
  const __m256i ones = _mm256_set1_epi16(1);
  const int64_t sum = run_chains<Int32x8, kInt8Ymm>(iters, [&](Int32x8& acc) PAGODA_AVX2 {
    opaque(x);
    const __m256i p16 = _mm256_maddubs_epi16(abs_w, _mm256_sign_epi8(x, w));
    acc += (Int32x8)_mm256_madd_epi16(p16, ones);
  });
  return sum != 1 ? 2.0 * 32 * kInt8Ymm * static_cast<double>(iters) : -1;
}

PAGODA_AVXVNNI __attribute__((flatten)) double int8_vnni_avx2(int64_t iters) {
  const __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(-1);
  const int64_t sum = run_chains<Int32x8, kInt8Ymm>(iters, [&](Int32x8& x) PAGODA_AVXVNNI {
    x = (Int32x8)_mm256_dpbusd_avx_epi32((__m256i)x, a, b);
  });
  return sum != 1 ? 2.0 * 32 * kInt8Ymm * static_cast<double>(iters) : -1;
}

// ---- Scalar: the scalar kernels' code, which the compiler vectorizes for
// baseline x86-64 (SSE2): 4-lane generic vectors of multiplies and adds
// (vec_scalar.h), and the int8 kernels' plain dot-product loop.
typedef float Lanes4 __attribute__((vector_size(16)));

double fp32_scalar(int64_t iters) {
  Lanes4 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = Lanes4{} + static_cast<float>(c);
  Lanes4 a = Lanes4{} + 0.999f;
  for (int64_t i = 0; i < iters; ++i) {
    opaque(a);
    for (Lanes4& x : acc) x = x * a + 1e-3f;
  }
  float s = 0;
  for (const Lanes4& x : acc) s += x[0] + x[1] + x[2] + x[3];
  return s != 0.0f ? 2.0 * 4 * kChains * static_cast<double>(iters) : -1;
}

// The dot of two int8 rows of kDotBytes (in L1), as quant_scalar.cpp's
// dot_tile loop; `iters` counts kDotBytes / 64 of them.
constexpr int kDotBytes = 256;

__attribute__((noinline)) int32_t int8_dot_scalar(const int8_t* x, const int8_t* w) {
  int32_t s = 0;
  for (int i = 0; i < kDotBytes; ++i) s += int32_t{x[i]} * int32_t{w[i]};
  return s;
}

double int8_scalar(int64_t iters) {
  int8_t x[kDotBytes], w[kDotBytes];
  for (int i = 0; i < kDotBytes; ++i) {
    x[i] = static_cast<int8_t>(i % 7 - 3);
    w[i] = static_cast<int8_t>(i % 5 - 2);
  }
  int64_t s = 0;
  const int64_t dots = iters * 64 / kDotBytes + 1;
  for (int64_t i = 0; i < dots; ++i) {
    int8_t* p = x;
    __asm__ volatile("" : "+r"(p)::"memory");  // a new dot each time
    s += int8_dot_scalar(p, w);
  }
  return s != 1 ? 2.0 * kDotBytes * static_cast<double>(dots) : -1;
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

PAGODA_AVX2 float read_sum_avx2(const float* x, int64_t n) {
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
  float s = hsum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
  for (; i < n; ++i) s += x[i];
  return s;
}

bool cpu_supports_avx512_vnni() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw");
}

}  // namespace

PeakProbe peak_probe(PeakKind kind, Isa isa) {
  const bool avx512 = isa == Isa::Avx512 || isa == Isa::Avx512Bf16;
  const bool avx2 = isa == Isa::Avx2 || isa == Isa::Avx2Vnni;
  switch (kind) {
    case PeakKind::Fp32Fma:
      if (avx512) return {"avx512 fma", fp32_avx512};
      if (avx2) return {"avx2 fma", fp32_avx2};
      return {"scalar mul+add", fp32_scalar};
    case PeakKind::Bf16Dot:
      if (isa == Isa::Avx512Bf16) return {"avx512 vdpbf16ps", bf16_dot_avx512};
      if (avx512) return {"avx512 bf16 widen + fma", bf16_widen_avx512};
      if (avx2) return {"avx2 bf16 widen + fma", bf16_widen_avx2};
      return {"scalar mul+add", fp32_scalar};
    case PeakKind::Int8Dot:
      // As dispatch.cpp's int8 tables: AVX-512 uses VNNI where the CPU has
      // it, else the AVX2 kernels.
      if (avx512 && cpu_supports_avx512_vnni()) return {"avx512 vpdpbusd", int8_vnni_avx512};
      if (isa == Isa::Avx2Vnni) return {"avx-vnni vpdpbusd", int8_vnni_avx2};
      if (avx512 || avx2) return {"avx2 vpmaddubsw + vpmaddwd", int8_maddubs_avx2};
      return {"scalar mul+add", int8_scalar};
  }
  return {"?", fp32_scalar};
}

double run_peak_loop(PeakKind kind, int64_t iters) {
  return peak_probe(kind, current_isa()).loop(iters);
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
