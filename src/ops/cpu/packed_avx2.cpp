// The packed bf16 GEMM of packed_widen_impl.h for AVX2 + FMA (ymm).
#include <cstdint>

#include "ops/cpu/kernels.h"
#include "ops/cpu/vec_avx2.h"

namespace pagoda::ops::avx2 {
// 16 ymm registers: 5 rows x 2 vectors = 10 accumulators, the 2 vectors'
// even and odd weights (4) and one row's 2 broadcast activations (the
// mask is a memory operand); a panel row's 6 vectors are 3 such column
// groups. A lone row (decode) takes the whole panel row: 6 accumulators.
// (With 64-column panels, 4 x 2 reached ~75% of the FMA peak at m = 512 on
// Zen 5, 6 rows x 1 vector at a time ~68%, this ~83%.)
constexpr int kWidenTileRows = 5, kWidenTileVectors = 2;
// Pairs per k block: a column group's block (kBlockPairs x 64 bytes,
// 16 KiB) stays in L1 while every row tile passes over it.
constexpr int64_t kWidenBlockPairs = 256;
}  // namespace pagoda::ops::avx2

#define PAGODA_ISA avx2
#include "ops/cpu/packed_widen_impl.h"

namespace pagoda::ops::cpu::avx2_impl {
void linear_packed(const float* x, int64_t m, const uint16_t* w, int64_t k, int64_t n, int64_t ldy,
                   const float* bias, float* y, int64_t p0, int64_t p1) {
  avx2::linear_packed_widen(x, m, w, k, n, ldy, bias, y, p0, p1);
}
}  // namespace pagoda::ops::cpu::avx2_impl
