// Int8 kernels for AArch64 NEON, in two variants around the same tiles
// (quant_neon_tile.h) and driver (quant_impl.h):
//  * quant_neon: smull + smlal multiply 8 byte pairs into int16 lanes (two
//    products a lane: |x| <= 127 and |w| <= 128 keep the sum below 32767,
//    exact) and sadalp adds the lane pairs into int32; any AArch64 CPU.
//  * quant_neon_dot: sdot adds groups of 4 byte products straight into
//    int32 lanes (the dot-product extension, Armv8.2+; dispatch checks
//    HWCAP_ASIMDDP). The analogue of x86's vpdpbusd, without its unsigned
//    operand, so no 128 * row_sums correction.
// Both give exact integer dot products, so the same bits.
#include <arm_neon.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "ops/cpu/quant_kernels.h"

#define PAGODA_QISA quant_neon
#define PAGODA_QTARGET
namespace pagoda::ops::quant_neon {
inline int32x4_t dot16(int32x4_t acc, int8x16_t x, int8x16_t w) {
  int16x8_t p = vmull_s8(vget_low_s8(x), vget_low_s8(w));
  p = vmlal_high_s8(p, x, w);
  return vpadalq_s16(acc, p);
}
#include "ops/cpu/quant_neon_tile.h"
}  // namespace pagoda::ops::quant_neon
#include "ops/cpu/quant_impl.h"
#undef PAGODA_QISA
#undef PAGODA_QTARGET

#define PAGODA_QISA quant_neon_dot
#define PAGODA_QTARGET __attribute__((target("arch=armv8.2-a+dotprod")))
namespace pagoda::ops::quant_neon_dot {
PAGODA_QTARGET inline int32x4_t dot16(int32x4_t acc, int8x16_t x, int8x16_t w) {
  return vdotq_s32(acc, x, w);
}
#include "ops/cpu/quant_neon_tile.h"
}  // namespace pagoda::ops::quant_neon_dot
#include "ops/cpu/quant_impl.h"

namespace pagoda::ops::cpu {
const QuantKernelTable& neon_quant_kernels() {
  static const QuantKernelTable table{"neon", quant_neon::quantize_rows, quant_neon::linear_i8};
  return table;
}
const QuantKernelTable& neon_dot_quant_kernels() {
  static const QuantKernelTable table{"neon-sdot", quant_neon_dot::quantize_rows,
                                      quant_neon_dot::linear_i8};
  return table;
}
}  // namespace pagoda::ops::cpu
