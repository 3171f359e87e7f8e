// Which kernel variant runs: CPU feature detection, the process-wide
// selection (best_isa() unless a test or --isa picks another), and the float
// and int8 kernel tables that selection stands for. x86 reads the features
// from cpuid, AArch64 from the kernel's hwcaps (getauxval); each build knows
// only its architecture's variants (and Scalar).
#if defined(__x86_64__)
#include <cpuid.h>
#elif defined(__aarch64__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

#include <atomic>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/cpu/kernels.h"
#include "ops/cpu/quant_kernels.h"
#include "ops/ops.h"

namespace pagoda::ops {

namespace {

#if defined(__x86_64__)
// CPUID leaf 1, ECX bit 29 (clang 14's __builtin_cpu_supports has no
// "f16c").
bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}

bool cpu_has(Isa isa) {
  __builtin_cpu_init();  // may run from a static initializer, before libgcc's own
  switch (isa) {
    case Isa::Scalar:
      return true;
    case Isa::Avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             cpu_has_f16c();  // FP8 weights widen through f16
    case Isa::Avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    case Isa::Avx512Bf16:  // libgcc also checks that the OS saves AVX-512 state
      return cpu_has(Isa::Avx512) && __builtin_cpu_supports("avx512bf16");
    case Isa::Avx2Vnni:
      return cpu_has(Isa::Avx2) && cpu::avx_vnni_quant_kernels() != nullptr;
    default:  // another architecture's
      return false;
  }
}
#elif defined(__aarch64__)
// AT_HWCAP / AT_HWCAP2 bits the kernel sets for what the CPU (and the
// kernel) support: ASIMD is NEON, ASIMDDP sdot/udot, BF16 bfdot/bfmmla.
bool cpu_has(Isa isa) {
  const unsigned long hwcap = getauxval(AT_HWCAP), hwcap2 = getauxval(AT_HWCAP2);
  switch (isa) {
    case Isa::Scalar:
      return true;
    case Isa::Neon:
      return (hwcap & HWCAP_ASIMD) != 0;
    case Isa::NeonDot:
      return cpu_has(Isa::Neon) && (hwcap & HWCAP_ASIMDDP) != 0;
    case Isa::NeonBf16:
      return cpu_has(Isa::NeonDot) && (hwcap2 & HWCAP2_BF16) != 0;
    default:  // another architecture's
      return false;
  }
}
#else
bool cpu_has(Isa isa) { return isa == Isa::Scalar; }
#endif

// Relaxed atomic: set_isa happens between forward passes, never during one,
// but readers on worker threads must not race with it formally.
std::atomic<Isa>& selected() {
  static std::atomic<Isa> isa{best_isa()};
  return isa;
}

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar:
      return "scalar";
    case Isa::Avx2:
      return "avx2";
    case Isa::Avx512:
      return "avx512";
    case Isa::Avx512Bf16:
      return "avx512bf16";
    case Isa::Avx2Vnni:
      return "avx2vnni";
    case Isa::Neon:
      return "neon";
    case Isa::NeonDot:
      return "neondot";
    case Isa::NeonBf16:
      return "neonbf16";
  }
  return "?";
}

Isa best_isa() {
  if (cpu_has(Isa::Avx512Bf16)) return Isa::Avx512Bf16;
  if (cpu_has(Isa::Avx512)) return Isa::Avx512;
  if (cpu_has(Isa::Avx2Vnni)) return Isa::Avx2Vnni;
  if (cpu_has(Isa::Avx2)) return Isa::Avx2;
  if (cpu_has(Isa::NeonBf16)) return Isa::NeonBf16;
  if (cpu_has(Isa::NeonDot)) return Isa::NeonDot;
  if (cpu_has(Isa::Neon)) return Isa::Neon;
  return Isa::Scalar;
}

bool isa_supported(Isa isa) { return cpu_has(isa); }

std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (Isa isa : kAllIsas) {
    if (cpu_has(isa)) out.push_back(isa);
  }
  return out;
}

std::string supported_isa_names() {
  std::string names;
  for (Isa isa : supported_isas()) names += std::string(names.empty() ? "" : ", ") + isa_name(isa);
  return names;
}

void set_isa(Isa isa) {
  if (!cpu_has(isa)) {
    throw_input_error("this CPU does not support the {} kernels (it supports: {})", isa_name(isa),
                      supported_isa_names());
  }
  selected().store(isa, std::memory_order_relaxed);
}

Isa current_isa() { return selected().load(std::memory_order_relaxed); }

namespace {

#if defined(__x86_64__)
// AVX-512's int8 kernels use VNNI when the CPU has it (it is not part of
// the Avx512 level), the AVX2 ones otherwise.
const cpu::QuantKernelTable& avx512_quant_kernels() {
  if (const cpu::QuantKernelTable* t = cpu::avx512_vnni_quant_kernels()) return *t;
  return cpu::avx2_quant_kernels();
}
#endif

// The kernels of one ISA level: the one place that maps a level to tables.
struct IsaTables {
  const cpu::KernelTable& (*kernels)();
  const cpu::QuantKernelTable& (*quant)();
};

IsaTables tables_for(Isa isa) {
  switch (isa) {
#if defined(__x86_64__)
    case Isa::Avx512Bf16:  // the same int8 kernels: bf16 dot products only change bf16 linears
      return {cpu::avx512bf16_kernels, avx512_quant_kernels};
    case Isa::Avx512:
      return {cpu::avx512_kernels, avx512_quant_kernels};
    case Isa::Avx2:
      return {cpu::avx2_kernels, cpu::avx2_quant_kernels};
    case Isa::Avx2Vnni:  // the AVX2 float kernels; vpdpbusd (256-bit) for int8
      return {cpu::avx2_kernels, []() -> const cpu::QuantKernelTable& {
                return *cpu::avx_vnni_quant_kernels();
              }};
#elif defined(__aarch64__)
    // The same f32 kernels on all three; sdot only changes int8 linears,
    // bfdot only bf16 ones.
    case Isa::NeonBf16:
      return {cpu::neon_bf16_kernels, cpu::neon_dot_quant_kernels};
    case Isa::NeonDot:
      return {cpu::neon_kernels, cpu::neon_dot_quant_kernels};
    case Isa::Neon:
      return {cpu::neon_kernels, cpu::neon_quant_kernels};
#endif
    default:  // Scalar (set_isa admits no other architecture's variant)
      break;
  }
  return {cpu::scalar_kernels, cpu::scalar_quant_kernels};
}

}  // namespace

const cpu::KernelTable& cpu::active_kernels() { return tables_for(current_isa()).kernels(); }

const cpu::QuantKernelTable& cpu::active_quant_kernels() {
  return tables_for(current_isa()).quant();
}

}  // namespace pagoda::ops
