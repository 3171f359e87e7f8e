// ops/ops.h entry points: split work across threads and call the kernel copy
// for the selected ISA.
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/parallel.h"
#include "ops/cpu/kernels.h"
#include "ops/ops.h"

namespace pagoda::ops {

namespace {

bool cpu_has(Isa isa) {
  __builtin_cpu_init();  // may run from a static initializer, before libgcc sets up
  switch (isa) {
    case Isa::Scalar:
      return true;
    case Isa::Avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Isa::Avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  }
  return false;
}

Isa g_isa = best_isa();

// Calls ISA::fn(args...) for the current ISA.
#define PAGODA_DISPATCH(fn, ...) \
  do {                           \
    switch (g_isa) {             \
      case Isa::Avx512:          \
        avx512::fn(__VA_ARGS__); \
        break;                   \
      case Isa::Avx2:            \
        avx2::fn(__VA_ARGS__);   \
        break;                   \
      case Isa::Scalar:          \
        scalar::fn(__VA_ARGS__); \
        break;                   \
    }                            \
  } while (0)

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar:
      return "scalar";
    case Isa::Avx2:
      return "avx2";
    case Isa::Avx512:
      return "avx512";
  }
  return "?";
}

Isa best_isa() {
  if (cpu_has(Isa::Avx512)) return Isa::Avx512;
  if (cpu_has(Isa::Avx2)) return Isa::Avx2;
  return Isa::Scalar;
}

bool isa_supported(Isa isa) { return cpu_has(isa); }

void set_isa(Isa isa) {
  if (!cpu_has(isa)) throw_input_error("this CPU does not support the {} kernels", isa_name(isa));
  g_isa = isa;
}

Isa current_isa() { return g_isa; }

void linear(const float* x, int64_t m, const Matrix& w, const float* bias, float* y) {
  if (m <= 0) return;
  PAGODA_CHECK(w.dtype == DType::F32 || w.dtype == DType::BF16, "linear: weight dtype {}",
               dtype_name(w.dtype));
  // Split output columns: every thread streams its own slice of the weights.
  parallel_for(w.rows, 16, [&](int64_t n0, int64_t n1) {
    PAGODA_DISPATCH(linear_columns, x, m, w, bias, y, n0, n1);
  });
}

void rms_norm(const float* x, const float* weight, int64_t m, int64_t n, float eps, float* y) {
  parallel_for(m, std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)),
               [&](int64_t r0, int64_t r1) {
                 PAGODA_DISPATCH(rms_norm_rows, x, weight, n, eps, y, r0, r1);
               });
}

void add_rms_norm(float* residual, const float* x, const float* weight, int64_t m, int64_t n,
                  float eps, float* y) {
  parallel_for(m, std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)),
               [&](int64_t r0, int64_t r1) {
                 PAGODA_DISPATCH(add_rows, residual, x, n, r0, r1);
                 PAGODA_DISPATCH(rms_norm_rows, residual, weight, n, eps, y, r0, r1);
               });
}

void rope(float* x, int64_t num_tokens, int num_heads, int head_dim, const int32_t* positions,
          const float* inv_freq, int rot_dim) {
  const int half = rot_dim / 2;
  parallel_for(num_tokens, 8, [&](int64_t t0, int64_t t1) {
    float cos_sin[2 * 512];
    for (int64_t t = t0; t < t1; ++t) {
      // The angle is formed in f32 as HF does (position * inv_freq), then
      // cos/sin are taken once per token for all heads.
      for (int i = 0; i < half; ++i) {
        const float angle = static_cast<float>(positions[t]) * inv_freq[i];
        cos_sin[2 * i] = std::cos(angle);
        cos_sin[2 * i + 1] = std::sin(angle);
      }
      for (int h = 0; h < num_heads; ++h) {
        float* v = x + (t * num_heads + h) * head_dim;
        for (int i = 0; i < half; ++i) {
          const float a = v[i], b = v[i + half], c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
          v[i] = a * c - b * s;
          v[i + half] = b * c + a * s;
        }
      }
    }
  });
}

void silu_mul(const float* gate_up, int64_t m, int64_t inter, float* out) {
  parallel_for(
      m, std::max<int64_t>(1, 8192 / std::max<int64_t>(inter, 1)),
      [&](int64_t r0, int64_t r1) { PAGODA_DISPATCH(silu_mul_rows, gate_up, inter, out, r0, r1); });
}

void softmax(float* x, int64_t n) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += (x[i] = std::exp(x[i] - mx));
  const float inv = 1.0f / sum;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void embedding(const int32_t* ids, int64_t m, const Matrix& table, float* out) {
  const int64_t d = table.cols;
  for (int64_t i = 0; i < m; ++i) {
    PAGODA_CHECK(ids[i] >= 0 && ids[i] < table.rows, "token id {} outside [0, {})", ids[i],
                 table.rows);
    if (table.dtype == DType::BF16) {
      const auto* row = static_cast<const uint16_t*>(table.data) + ids[i] * d;
      for (int64_t j = 0; j < d; ++j) out[i * d + j] = bf16_to_f32(row[j]);
    } else {
      std::memcpy(out + i * d, static_cast<const float*>(table.data) + ids[i] * d,
                  d * sizeof(float));
    }
  }
}

void write_kv(const float* k, const float* v, const int64_t* slot_mapping, int64_t num_tokens,
              const KVLayout& layout, float* k_cache, float* v_cache) {
  const int64_t row = int64_t{layout.num_kv_heads} * layout.head_dim;
  for (int64_t t = 0; t < num_tokens; ++t) {
    if (slot_mapping[t] < 0) continue;
    std::memcpy(k_cache + slot_mapping[t] * row, k + t * row, row * sizeof(float));
    std::memcpy(v_cache + slot_mapping[t] * row, v + t * row, row * sizeof(float));
  }
}

void paged_attention(const float* q, const float* k_cache, const float* v_cache,
                     const KVLayout& layout, const AttentionBatch& batch, int num_q_heads,
                     float scale, float* out) {
  PAGODA_CHECK(layout.head_dim <= 512, "head_dim {} > 512", layout.head_dim);
  PAGODA_CHECK(num_q_heads % layout.num_kv_heads == 0, "q heads {} kv heads {}", num_q_heads,
               layout.num_kv_heads);
  const int64_t rows = batch.query_start_loc[batch.num_seqs];
  // Which sequence each query row belongs to (small; one entry per new token).
  thread_local std::vector<int32_t> row_seq;
  row_seq.resize(rows);
  for (int s = 0; s < batch.num_seqs; ++s) {
    for (int32_t r = batch.query_start_loc[s]; r < batch.query_start_loc[s + 1]; ++r)
      row_seq[r] = s;
  }
  const int32_t* row_seq_data = row_seq.data();
  parallel_for(rows * num_q_heads, 4, [&](int64_t w0, int64_t w1) {
    PAGODA_DISPATCH(attention_items, q, k_cache, v_cache, layout, batch, num_q_heads, scale, out,
                    row_seq_data, w0, w1);
  });
}

}  // namespace pagoda::ops
