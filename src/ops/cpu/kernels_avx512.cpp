// The kernels of kernels_impl.h compiled for the avx512 target.
#include <cstdint>

#include "ops/cpu/kernels.h"
#include "ops/cpu/vec_avx512.h"

#define PAGODA_ISA avx512
#include "ops/cpu/kernels_impl.h"

namespace pagoda::ops::cpu {
const KernelTable& avx512_kernels() { return avx512::kernel_table(); }
}  // namespace pagoda::ops::cpu
