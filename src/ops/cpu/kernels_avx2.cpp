// The kernels of kernels_impl.h compiled for the avx2 target.
#include <cstdint>

#include "ops/cpu/kernels.h"
#include "ops/cpu/vec_avx2.h"

#define PAGODA_ISA avx2
#include "ops/cpu/kernels_impl.h"

namespace pagoda::ops::cpu {
const KernelTable& avx2_kernels() { return avx2::kernel_table(); }
}  // namespace pagoda::ops::cpu
