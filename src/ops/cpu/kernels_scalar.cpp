// The kernels compiled for one ISA; see kernels_impl.h.
#include <cstdint>

#include "ops/cpu/kernels.h"
#include "ops/ops.h"

#define PAGODA_ISA scalar
#include "ops/cpu/kernels_impl.h"
