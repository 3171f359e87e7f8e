// Which kernel variant runs: CPU feature detection, the process-wide
// selection (best_isa() unless a test or --isa picks another), and the float
// and int8 kernel tables that selection stands for.
#include <cpuid.h>

#include <atomic>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/cpu/kernels.h"
#include "ops/cpu/quant_kernels.h"
#include "ops/ops.h"

namespace pagoda::ops {

namespace {

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
  }
  return false;
}

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
  }
  return "?";
}

Isa best_isa() {
  if (cpu_has(Isa::Avx512Bf16)) return Isa::Avx512Bf16;
  if (cpu_has(Isa::Avx512)) return Isa::Avx512;
  if (cpu_has(Isa::Avx2Vnni)) return Isa::Avx2Vnni;
  if (cpu_has(Isa::Avx2)) return Isa::Avx2;
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

// AVX-512's int8 kernels use VNNI when the CPU has it (it is not part of
// the Avx512 level), the AVX2 ones otherwise.
const cpu::QuantKernelTable& avx512_quant_kernels() {
  if (const cpu::QuantKernelTable* t = cpu::avx512_vnni_quant_kernels()) return *t;
  return cpu::avx2_quant_kernels();
}

// The kernels of one ISA level: the one place that maps a level to tables.
struct IsaTables {
  const cpu::KernelTable& (*kernels)();
  const cpu::QuantKernelTable& (*quant)();
};

IsaTables tables_for(Isa isa) {
  switch (isa) {
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
    case Isa::Scalar:
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
