// The kernels of kernels_impl.h compiled for AArch64 NEON.
#include <cstdint>

#include "ops/cpu/kernels.h"
#include "ops/cpu/vec_neon.h"

#define PAGODA_ISA neon
#include "ops/cpu/kernels_impl.h"

namespace pagoda::ops::cpu {
const KernelTable& neon_kernels() { return neon::kernel_table(); }
}  // namespace pagoda::ops::cpu
