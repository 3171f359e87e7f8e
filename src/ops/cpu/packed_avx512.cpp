// The packed bf16 GEMM of packed_widen_impl.h for AVX-512F without BF16
// (Skylake-SP, Ice Lake): zmm, 16 columns' pairs per load.
#include <cstdint>

#include "ops/cpu/kernels.h"
#include "ops/cpu/vec_avx512.h"

namespace pagoda::ops::avx512 {
// 32 zmm registers: 6 rows x the panel row's 3 vectors = 18 accumulators,
// the 3 vectors' even and odd weights (6) and one row's 2 broadcasts. (With
// 64-column panels, 4 x 4 ran at 85-88% of the FMA peak at m = 32 and 64,
// 90-92% at m = 512 on Zen 5, --isa avx512, one thread's CPU clock; 5 x 4
// and 6 x 4 within noise of it, 8 x 2 74-84%.) A lone row (decode) is the
// same 3-vector tile.
constexpr int kWidenTileRows = 6, kWidenTileVectors = 3;
// Pairs per k block: a block of the panel (kBlockPairs x 192 bytes, 24 KiB)
// stays in L1/L2 while every row tile passes over it (64 pairs measured
// the same to 5% lower with 64-column panels).
constexpr int64_t kWidenBlockPairs = 128;
}  // namespace pagoda::ops::avx512

#define PAGODA_ISA avx512
#include "ops/cpu/packed_widen_impl.h"

namespace pagoda::ops::cpu::avx512_impl {
void linear_packed(const float* x, int64_t m, const uint16_t* w, int64_t k, int64_t n, int64_t ldy,
                   const float* bias, float* y, int64_t p0, int64_t p1) {
  avx512::linear_packed_widen(x, m, w, k, n, ldy, bias, y, p0, p1);
}
}  // namespace pagoda::ops::cpu::avx512_impl
