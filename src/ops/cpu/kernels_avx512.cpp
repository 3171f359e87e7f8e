// The kernels of kernels_impl.h compiled for the avx512 target.
#include <cstdint>

#include "ops/cpu/kernels.h"
#include "ops/cpu/vec_avx512.h"

#define PAGODA_ISA avx512
#include "ops/cpu/kernels_impl.h"

namespace pagoda::ops::cpu {
const KernelTable& avx512_kernels() {
  static const KernelTable table = [] {
    KernelTable t = avx512::kernel_table();
    t.linear_bf16_packed_f32 = avx512_impl::linear_packed;
    return t;
  }();
  return table;
}
}  // namespace pagoda::ops::cpu
