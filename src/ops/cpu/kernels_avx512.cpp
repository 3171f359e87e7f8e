// The kernels compiled for one ISA; see kernels_impl.h.
#include <cstdint>

#include "ops/cpu/kernels.h"
#include "ops/ops.h"

#if defined(__clang__)
#pragma clang attribute push( \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma"))), apply_to = function)
#else
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")
#endif
#define PAGODA_ISA avx512
#include "ops/cpu/kernels_impl.h"
#if defined(__clang__)
#pragma clang attribute pop
#endif
