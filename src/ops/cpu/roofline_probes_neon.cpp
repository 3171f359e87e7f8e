// The probe loops behind ops/roofline.h on AArch64 (roofline_probes.cpp is
// x86's): independent accumulator chains of the instructions the NEON
// kernels use, enough of them to cover the latency on every pipe.
//   f32: fmla (vec_neon.h's vfma);
//   bf16: bfdot (kernels_neon_bf16.cpp), where the CPU has BF16;
//   int8: sdot (quant_neon.cpp's neon-sdot kernels) where the CPU has the
//   dot-product extension, else the smull + smlal + sadalp sequence of the
//   plain neon kernels (16 multiply-adds per three instructions).
#include <arm_neon.h>
#include <asm/hwcap.h>
#include <sys/auxv.h>

#include <cstdint>

#include "ops/roofline.h"

namespace pagoda::ops {

namespace {

constexpr int kChains = 12;

bool has_dotprod() { return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0; }
bool has_bf16() { return (getauxval(AT_HWCAP2) & HWCAP2_BF16) != 0; }

float hsum(float32x4_t v) { return vaddvq_f32(v); }
// In int64: the int8 probe's lanes wrap around over a long run and their
// int32 sum would overflow (undefined behaviour, caught by UBSan).
int64_t hsum(int32x4_t v) {
  return int64_t{vgetq_lane_s32(v, 0)} + vgetq_lane_s32(v, 1) + vgetq_lane_s32(v, 2) +
         vgetq_lane_s32(v, 3);
}
void chain_start(float32x4_t& x, int c) { x = vdupq_n_f32(static_cast<float>(c)); }
void chain_start(int32x4_t& x, int c) { x = vdupq_n_s32(c); }
void chain_fold(float32x4_t& s, float32x4_t x) { s = vaddq_f32(s, x); }
void chain_fold(int32x4_t& s, int32x4_t x) { s = vaddq_s32(s, x); }

// kChains accumulators of type Acc, each advanced `iters` times by
// step(acc); returns the horizontal sum of them all (used, so that the
// loop is not optimized away). As in roofline_probes.cpp, the probes are
// `flatten` so that the step inlines into their targeted body.
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

__attribute__((flatten)) double fp32_loop(int64_t iters) {
  const float32x4_t a = vdupq_n_f32(0.999f), b = vdupq_n_f32(1e-3f);
  const float sum = run_chains<float32x4_t>(iters, [&](float32x4_t& x) { x = vfmaq_f32(b, x, a); });
  return sum != 0.0f ? 2.0 * 4 * kChains * static_cast<double>(iters) : -1;
}

__attribute__((target("arch=armv8.2-a+bf16"), flatten)) double bf16_loop(int64_t iters) {
  // The constants pass through a register: GCC 12 would materialise 1.0
  // with an FP16 fmov, which this target (bf16 without fp16) cannot encode.
  uint16_t one = 0x3f80, small = 0x3a83;  // 1.0, ~1e-3
  asm("" : "+r"(one), "+r"(small));
  const bfloat16x8_t a = vreinterpretq_bf16_u16(vdupq_n_u16(one));
  const bfloat16x8_t b = vreinterpretq_bf16_u16(vdupq_n_u16(small));
  const float sum = run_chains<float32x4_t>(
      iters, [&](float32x4_t& x) __attribute__((target("arch=armv8.2-a+bf16"))) { x = vbfdotq_f32(x, a, b); });
  return sum != 0.0f ? 2.0 * 8 * kChains * static_cast<double>(iters) : -1;
}

__attribute__((target("arch=armv8.2-a+dotprod"), flatten)) double sdot_loop(int64_t iters) {
  const int8x16_t a = vdupq_n_s8(3), b = vdupq_n_s8(-1);
  const int64_t sum = run_chains<int32x4_t>(
      iters, [&](int32x4_t& x) __attribute__((target("arch=armv8.2-a+dotprod"))) { x = vdotq_s32(x, a, b); });
  return sum != 1 ? 2.0 * 16 * kChains * static_cast<double>(iters) : -1;
}

__attribute__((flatten)) double smull_loop(int64_t iters) {
  const int8x16_t a = vdupq_n_s8(3), b = vdupq_n_s8(-1);
  const int64_t sum = run_chains<int32x4_t>(iters, [&](int32x4_t& x) {
    // The operands depend on the chain so the products are not hoisted.
    const int8x16_t xa = veorq_s8(a, vreinterpretq_s8_s32(x));
    x = vpadalq_s16(x, vmlal_high_s8(vmull_s8(vget_low_s8(xa), vget_low_s8(b)), xa, b));
  });
  return sum != 1 ? 2.0 * 16 * kChains * static_cast<double>(iters) : -1;
}

}  // namespace

// As dispatch.cpp's tables: f32 on fmla everywhere (the scalar kernels'
// 4-lane vectors compile to NEON too, AArch64's baseline), bf16 with bfdot
// on neonbf16 and widened to f32 elsewhere, int8 with sdot from neondot up
// and the widening multiplies below it.
PeakProbe peak_probe(PeakKind kind, Isa isa) {
  const bool dot = (isa == Isa::NeonDot || isa == Isa::NeonBf16) && has_dotprod();
  switch (kind) {
    case PeakKind::Fp32Fma:
      return {"neon fmla", fp32_loop};
    case PeakKind::Bf16Dot:
      if (isa == Isa::NeonBf16 && has_bf16()) return {"neon bfdot", bf16_loop};
      return {"neon bf16 widen + fmla", fp32_loop};
    case PeakKind::Int8Dot:
      if (dot) return {"neon sdot", sdot_loop};
      return {"neon smull + sadalp", smull_loop};
  }
  return {"?", fp32_loop};
}

double run_peak_loop(PeakKind kind, int64_t iters) {
  return peak_probe(kind, current_isa()).loop(iters);
}

float read_sum(const float* x, int64_t n) {
  float32x4_t s0 = vdupq_n_f32(0.0f), s1 = s0, s2 = s0, s3 = s0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    // Lines 4 KiB ahead, as the x86 probe asks (one 64-byte line per step).
    __builtin_prefetch(x + i + 1024, 0, 0);
    s0 = vaddq_f32(s0, vld1q_f32(x + i));
    s1 = vaddq_f32(s1, vld1q_f32(x + i + 4));
    s2 = vaddq_f32(s2, vld1q_f32(x + i + 8));
    s3 = vaddq_f32(s3, vld1q_f32(x + i + 12));
  }
  float s = hsum(vaddq_f32(vaddq_f32(s0, s1), vaddq_f32(s2, s3)));
  for (; i < n; ++i) s += x[i];
  return s;
}

}  // namespace pagoda::ops
