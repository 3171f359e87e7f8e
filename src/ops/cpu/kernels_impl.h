// The kernel bodies, written once as plain loops and compiled three times
// (kernels_scalar.cpp, kernels_avx2.cpp, kernels_avx512.cpp) with different
// target ISAs; each copy lives in namespace pagoda::ops::PAGODA_ISA.
//
// Rules that keep the copies safe and exact:
// * The including file pulls in every standard header BEFORE it switches the
//   target ISA, and this file instantiates no standard templates, so no
//   AVX-512 copy of a shared inline function can leak into other code.
// * Every output element is computed by the same instruction sequence
//   whatever the batch size or thread split (e.g. linear always runs its
//   4-row tile, padding with a repeated row), so greedy outputs do not depend
//   on batch composition.
// * Reductions use `omp simd reduction`, which lets the compiler vectorize
//   them with a fixed lane order.
#ifndef PAGODA_ISA
#error "define PAGODA_ISA before including kernels_impl.h"
#endif

namespace pagoda::ops::PAGODA_ISA {

namespace {

inline float load_bf16(const uint16_t* p, int64_t i) {
  const uint32_t bits = static_cast<uint32_t>(p[i]) << 16;
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}

inline float fmax2(float a, float b) { return a > b ? a : b; }

// y[r, n0:n1] for the 4 rows xs[0..3] (some may repeat), f32 weights.
void linear_tile_f32(const float* const xs[4], const float* w, int64_t k, int64_t n0, int64_t n1,
                     const float* bias, float* const ys[4], int rows) {
  for (int64_t n = n0; n < n1; ++n) {
    const float* wr = w + n * k;
    const float *x0 = xs[0], *x1 = xs[1], *x2 = xs[2], *x3 = xs[3];
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
    for (int64_t i = 0; i < k; ++i) {
      const float wv = wr[i];
      s0 += x0[i] * wv;
      s1 += x1[i] * wv;
      s2 += x2[i] * wv;
      s3 += x3[i] * wv;
    }
    const float b = bias ? bias[n] : 0.0f;
    const float s[4] = {s0, s1, s2, s3};
    for (int r = 0; r < rows; ++r) ys[r][n] = s[r] + b;
  }
}

void linear_tile_bf16(const float* const xs[4], const uint16_t* w, int64_t k, int64_t n0,
                      int64_t n1, const float* bias, float* const ys[4], int rows) {
  for (int64_t n = n0; n < n1; ++n) {
    const uint16_t* wr = w + n * k;
    const float *x0 = xs[0], *x1 = xs[1], *x2 = xs[2], *x3 = xs[3];
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
    for (int64_t i = 0; i < k; ++i) {
      const float wv = load_bf16(wr, i);
      s0 += x0[i] * wv;
      s1 += x1[i] * wv;
      s2 += x2[i] * wv;
      s3 += x3[i] * wv;
    }
    const float b = bias ? bias[n] : 0.0f;
    const float s[4] = {s0, s1, s2, s3};
    for (int r = 0; r < rows; ++r) ys[r][n] = s[r] + b;
  }
}

}  // namespace

// Output columns [n0, n1) of y for all m rows.
void linear_columns(const float* x, int64_t m, const Matrix& w, const float* bias, float* y,
                    int64_t n0, int64_t n1) {
  const int64_t k = w.cols, n = w.rows;
  // Column blocks small enough that the 4 x rows and the block's weight rows
  // stay in cache while all row tiles pass over them.
  const int64_t block = 64;
  for (int64_t c0 = n0; c0 < n1; c0 += block) {
    const int64_t c1 = c0 + block < n1 ? c0 + block : n1;
    for (int64_t r = 0; r < m; r += 4) {
      const int rows = m - r < 4 ? static_cast<int>(m - r) : 4;
      const float* xs[4];
      float* ys[4];
      for (int i = 0; i < 4; ++i) {
        const int64_t row = r + (i < rows ? i : 0);  // pad with a repeated row
        xs[i] = x + row * k;
        ys[i] = y + row * n;
      }
      if (w.dtype == DType::BF16) {
        linear_tile_bf16(xs, static_cast<const uint16_t*>(w.data), k, c0, c1, bias, ys, rows);
      } else {
        linear_tile_f32(xs, static_cast<const float*>(w.data), k, c0, c1, bias, ys, rows);
      }
    }
  }
}

void rms_norm_rows(const float* x, const float* weight, int64_t n, float eps, float* y, int64_t r0,
                   int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    float ss = 0;
#pragma omp simd reduction(+ : ss)
    for (int64_t j = 0; j < n; ++j) ss += xr[j] * xr[j];
    const float inv = 1.0f / __builtin_sqrtf(ss / static_cast<float>(n) + eps);
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) yr[j] = xr[j] * inv * weight[j];
  }
}

void add_rows(float* residual, const float* x, int64_t n, int64_t r0, int64_t r1) {
  float* a = residual + r0 * n;
  const float* b = x + r0 * n;
  const int64_t count = (r1 - r0) * n;
#pragma omp simd
  for (int64_t i = 0; i < count; ++i) a[i] += b[i];
}

void silu_mul_rows(const float* gate_up, int64_t inter, float* out, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* g = gate_up + r * 2 * inter;
    const float* u = g + inter;
    float* o = out + r * inter;
    for (int64_t j = 0; j < inter; ++j) o[j] = g[j] / (1.0f + __builtin_expf(-g[j])) * u[j];
  }
}

// Attention for work items [w0, w1), item = (query row, q head).
void attention_items(const float* q, const float* k_cache, const float* v_cache,
                     const KVLayout& layout, const AttentionBatch& batch, int num_q_heads,
                     float scale, float* out, const int32_t* row_seq, int64_t w0, int64_t w1) {
  const int hd = layout.head_dim, kvh = layout.num_kv_heads, bs = layout.block_size;
  const int group = num_q_heads / kvh;
  float acc[512];
  for (int64_t item = w0; item < w1; ++item) {
    const int64_t row = item / num_q_heads;
    const int h = static_cast<int>(item % num_q_heads);
    const int s = row_seq[row];
    const int64_t num_new = batch.query_start_loc[s + 1] - batch.query_start_loc[s];
    const int64_t last_key = batch.seq_lens[s] - num_new + (row - batch.query_start_loc[s]);
    const int64_t first_key = batch.sliding_window > 0 && last_key - batch.sliding_window + 1 > 0
                                  ? last_key - batch.sliding_window + 1
                                  : 0;
    const int32_t* table = batch.block_tables + int64_t{s} * batch.max_blocks_per_seq;
    const float* qv = q + (row * num_q_heads + h) * hd;
    const int kv_head = h / group;
    for (int d = 0; d < hd; ++d) acc[d] = 0;
    float running_max = -__builtin_inff(), denom = 0;
    // Online softmax, block by block through the block table.
    for (int64_t t = first_key; t <= last_key;) {
      const int64_t block = t / bs;
      const int64_t block_end = (block + 1) * bs - 1 < last_key ? (block + 1) * bs - 1 : last_key;
      const int64_t base = int64_t{table[block]} * bs;
      for (; t <= block_end; ++t) {
        const int64_t slot = base + t % bs;
        const float* kr = k_cache + (slot * kvh + kv_head) * hd;
        const float* vr = v_cache + (slot * kvh + kv_head) * hd;
        float dot = 0;
#pragma omp simd reduction(+ : dot)
        for (int d = 0; d < hd; ++d) dot += qv[d] * kr[d];
        const float score = dot * scale;
        if (score > running_max) {
          const float correction = __builtin_expf(running_max - score);
          denom *= correction;
#pragma omp simd
          for (int d = 0; d < hd; ++d) acc[d] *= correction;
          running_max = score;
        }
        const float p = __builtin_expf(score - running_max);
        denom += p;
#pragma omp simd
        for (int d = 0; d < hd; ++d) acc[d] += p * vr[d];
      }
    }
    float* o = out + (row * num_q_heads + h) * hd;
    const float inv = 1.0f / denom;
#pragma omp simd
    for (int d = 0; d < hd; ++d) o[d] = acc[d] * inv;
  }
}

}  // namespace pagoda::ops::PAGODA_ISA
