// The kernels of kernels_impl.h compiled for the avx2 target.
#include <cstdint>

#include "ops/cpu/kernels.h"
#include "ops/cpu/vec_avx2.h"

#define PAGODA_ISA avx2
#include "ops/cpu/kernels_impl.h"

namespace pagoda::ops::cpu {
const KernelTable& avx2_kernels() {
  static const KernelTable table = [] {
    KernelTable t = avx2::kernel_table();
    t.linear_bf16_packed_f32 = avx2_impl::linear_packed;
    return t;
  }();
  return table;
}
}  // namespace pagoda::ops::cpu
