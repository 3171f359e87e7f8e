// The kernels of kernels_impl.h compiled for the scalar target.
#include <cstdint>

#include "ops/cpu/kernels.h"
#include "ops/cpu/vec_scalar.h"

#define PAGODA_ISA scalar
#include "ops/cpu/kernels_impl.h"

namespace pagoda::ops::cpu {
const KernelTable& scalar_kernels() { return scalar::kernel_table(); }
}  // namespace pagoda::ops::cpu
