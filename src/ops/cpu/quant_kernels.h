// The per-ISA int8 kernel tables behind I8 linears (ops/quant.h): the same
// driver (quant_impl.h) around each ISA's exact integer dot-product tile.
#pragma once

#include <cmath>
#include <cstdint>

#include "ops/ops.h"

namespace pagoda::ops::cpu {

struct QuantKernelTable {
  const char* name;
  // Rows [r0, r1) of x [*, k] quantized into q [*, k] and scales (ops/quant.h).
  void (*quantize_rows)(const float* x, int64_t k, int8_t* q, float* scales, int64_t r0,
                        int64_t r1);
  // y[:, n0:n1] for quantized activations qx [m, k] (scales x_scales) and
  // int8 weights w (rows n0..n1 read; row scales w_scales, row sums
  // row_sums); y has row stride ldy. Every output element is one exact
  // integer dot product and the same float epilogue, whatever the tile.
  void (*linear_i8)(const int8_t* qx, const float* x_scales, int64_t m, const int8_t* w,
                    const float* w_scales, const int32_t* row_sums, int64_t k, int64_t ldy,
                    const float* bias, float* y, int64_t n0, int64_t n1);
  // The same over packed weights (ops/packed.h: panels of 64 rows, 4 inputs
  // per word, k a multiple of 4): the columns of panels [p0, p1), those >= n
  // not stored. Bit-identical to linear_i8 (exact integers, same epilogue).
  // Null where the ISA has no native kernel (a portable loop runs then).
  void (*linear_i8_packed)(const int8_t* qx, const float* x_scales, int64_t m, const int8_t* w,
                           const float* w_scales, const int32_t* row_sums, int64_t k, int64_t n,
                           int64_t ldy, const float* bias, float* y, int64_t p0,
                           int64_t p1) = nullptr;
};

const QuantKernelTable& scalar_quant_kernels();
const QuantKernelTable& avx2_quant_kernels();
// Null when the CPU (or compiler) has no AVX-512 VNNI.
const QuantKernelTable* avx512_vnni_quant_kernels();
// Null when the CPU (or compiler) has no AVX-VNNI (256-bit vpdpbusd).
const QuantKernelTable* avx_vnni_quant_kernels();
// AArch64: widening multiplies (smull) on any NEON CPU, sdot where the CPU
// has the dot-product extension (dispatch checks).
const QuantKernelTable& neon_quant_kernels();
const QuantKernelTable& neon_dot_quant_kernels();

// The table for the ISA chosen by set_isa: Avx512 uses VNNI when the CPU
// has it and the AVX2 kernels otherwise.
const QuantKernelTable& active_quant_kernels();

// Refuses what is not an I8 matrix the kernels take.
void check_i8(const Matrix& w);

// x [m, k] quantized (ops/quant.h) into buffers of the calling thread that
// only grow: the activations every I8 output of one linear_multi shares.
struct QuantizedRows {
  const int8_t* q = nullptr;
  const float* scales = nullptr;
};
QuantizedRows quantize_activations(const float* x, int64_t m, int64_t k);

// Output units [u0, u1) of y = x w^T for I8 weights w (check_i8), a unit
// being one panel of packed weights or kI8ColumnUnit columns: the share of
// one thread, so that linear_multi splits all its outputs in one go.
constexpr int64_t kI8ColumnUnit = 16;  // a multiple of every tile width
void linear_i8_units(const QuantizedRows& x, int64_t m, const Matrix& w, const float* bias,
                     float* y, int64_t ldy, int64_t u0, int64_t u1);

// The float epilogue every variant shares (ref::linear_i8_quantized spells
// it the same way). The bias is added with an explicit fma: compilers may
// contract a multiply-add in FMA-targeted code but not in baseline code,
// so leaving it to them would make variants differ in the last bit.
inline float dequantize(int32_t dot, float x_scale, float w_scale, const float* bias) {
  const float s = x_scale * w_scale;
  return bias ? std::fma(static_cast<float>(dot), s, *bias) : static_cast<float>(dot) * s;
}

}  // namespace pagoda::ops::cpu
