// Int8 weight quantization (W8A8 with dynamic activations): the pieces of
// ops::linear on I8 matrices, exposed so the loader can quantize weights
// with the same rounding and tests can check each step.
//
// Quantization of a row v of length k (weights and activations alike):
//   amax = max |v|, scale = amax / 127, q = round_half_even(v * (127 / amax))
// so q is in [-127, 127] (never -128) and v ~ q * scale; an all-zero row
// has scale 0 and q = 0. Every ISA computes the same bits: the max is exact
// in any order, and the rest is one IEEE division and one multiply per value.
//
// Linear with I8 weights: y[i, n] = fma(float(dot_i32(qx[i], qw[n])),
// x_scale[i] * w_scale[n], bias[n]), the dot product exact in integers,
// so every kernel variant and every tile/thread split gives identical bits.
#pragma once

#include <cstdint>

#include "ops/ops.h"

namespace pagoda::ops {

// The longest row an I8 linear accepts: k * 255 * 127 must fit in int32
// (the VNNI kernel sums unsigned activations).
constexpr int64_t kMaxInt8Cols = 65536;

// Quantizes m rows of length k: q [m, k], scales [m]. Threaded over rows.
void quantize_rows_i8(const float* x, int64_t m, int64_t k, int8_t* q, float* scales);

// The integer part of linear on I8 weights, for already quantized
// activations qx [m, w.cols] with per-row scales x_scales [m]; same output
// convention as linear (ldy = 0: w.rows).
void linear_i8_quantized(const int8_t* qx, const float* x_scales, int64_t m, const Matrix& w,
                         const float* bias, float* y, int64_t ldy = 0);

// Name of the int8 dot-product kernel the current ISA selection uses
// ("avx512-vnni", "avx2", "scalar"), for logs and benchmarks.
const char* int8_kernel_name();

}  // namespace pagoda::ops
