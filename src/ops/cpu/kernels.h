// Declarations of the per-ISA kernel copies (see kernels_impl.h).
#pragma once

#include <cstdint>

#include "ops/ops.h"

#define PAGODA_DECLARE_KERNELS(ISA)                                                              \
  namespace pagoda::ops::ISA {                                                                   \
  void linear_columns(const float* x, int64_t m, const Matrix& w, const float* bias, float* y,   \
                      int64_t n0, int64_t n1);                                                   \
  void rms_norm_rows(const float* x, const float* weight, int64_t n, float eps, float* y,        \
                     int64_t r0, int64_t r1);                                                    \
  void add_rows(float* residual, const float* x, int64_t n, int64_t r0, int64_t r1);             \
  void silu_mul_rows(const float* gate_up, int64_t inter, float* out, int64_t r0, int64_t r1);   \
  void attention_items(const float* q, const float* k_cache, const float* v_cache,               \
                       const KVLayout& layout, const AttentionBatch& batch, int num_q_heads,     \
                       float scale, float* out, const int32_t* row_seq, int64_t w0, int64_t w1); \
  }

PAGODA_DECLARE_KERNELS(scalar)
PAGODA_DECLARE_KERNELS(avx2)
PAGODA_DECLARE_KERNELS(avx512)
