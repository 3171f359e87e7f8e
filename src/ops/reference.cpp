#include "ops/reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "ops/packed.h"

namespace pagoda::ops::ref {

float matrix_at(const Matrix& w, int64_t row, int64_t col) {
  const int64_t i = w.packed ? packed_index(row, col, w.rows, w.cols, w.dtype) : row * w.cols + col;
  if (w.dtype == DType::BF16) {
    bf16_t h;
    std::memcpy(&h, static_cast<const uint8_t*>(w.data) + 2 * i, 2);
    return bf16_to_f32(h);
  }
  if (w.dtype == DType::I8) return static_cast<const int8_t*>(w.data)[i] * w.scales[row];
  if (w.dtype == DType::F4E2M1) {  // low nibble = even column (ops.h)
    const uint8_t byte = static_cast<const uint8_t*>(w.data)[row * (w.cols / 2) + col / 2];
    const uint8_t scale = w.e8m0_scales[row * (w.cols / kFp4Block) + col / kFp4Block];
    return f4e2m1_to_f32(col % 2 ? byte >> 4 : byte & 15) * f8e8m0_to_f32(scale);
  }
  if (w.dtype == DType::F8E4M3) {
    const float scale = w.block_scales[row / kFp8Block * fp8_scale_cols(w.cols) + col / kFp8Block];
    return f8e4m3_to_f32(static_cast<const uint8_t*>(w.data)[i]) * scale;
  }
  return static_cast<const float*>(w.data)[i];
}

void linear(const float* x, int64_t m, const Matrix& w, const float* bias, float* y, int64_t ldy) {
  if (ldy == 0) ldy = w.rows;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t n = 0; n < w.rows; ++n) {
      double sum = bias ? bias[n] : 0.0;
      for (int64_t k = 0; k < w.cols; ++k) sum += double{x[i * w.cols + k]} * matrix_at(w, n, k);
      y[i * ldy + n] = static_cast<float>(sum);
    }
  }
}

void rms_norm(const float* x, const float* weight, int64_t m, int64_t n, float eps, float* y) {
  for (int64_t i = 0; i < m; ++i) {
    double ss = 0;
    for (int64_t j = 0; j < n; ++j) ss += double{x[i * n + j]} * x[i * n + j];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
    for (int64_t j = 0; j < n; ++j)
      y[i * n + j] = static_cast<float>(x[i * n + j] * inv * weight[j]);
  }
}

void add_rms_norm(float* residual, const float* x, const float* weight, int64_t m, int64_t n,
                  float eps, float* y) {
  for (int64_t i = 0; i < m * n; ++i) residual[i] += x[i];
  rms_norm(residual, weight, m, n, eps, y);
}

void rope(float* x, int64_t num_tokens, int num_heads, int head_dim, const int32_t* positions,
          const float* inv_freq, int rot_dim) {
  const int half = rot_dim / 2;
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int h = 0; h < num_heads; ++h) {
      float* v = x + (t * num_heads + h) * head_dim;
      for (int i = 0; i < half; ++i) {
        const double angle = double{static_cast<float>(positions[t]) * inv_freq[i]};
        const double c = std::cos(angle), s = std::sin(angle);
        const double a = v[i], b = v[i + half];
        v[i] = static_cast<float>(a * c - b * s);
        v[i + half] = static_cast<float>(b * c + a * s);
      }
    }
  }
}

void rope(float* x, int64_t num_tokens, const int32_t* positions, const float* inv_freq,
          const RopeParams& p) {
  const int half = p.rot_dim / 2;
  const int64_t token_stride = p.token_stride ? p.token_stride : int64_t{p.num_heads} * p.head_dim;
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int h = 0; h < p.num_heads; ++h) {
      float* v = x + t * token_stride + int64_t{h} * p.head_dim + p.offset;
      for (int i = 0; i < half; ++i) {
        // The two elements pair i rotates, as the layouts define them.
        const int a_at = p.layout == RopeLayout::Interleaved ? 2 * i : i;
        const int b_at = p.layout == RopeLayout::Interleaved ? 2 * i + 1 : i + half;
        const double angle = double{static_cast<float>(positions[t]) * inv_freq[i]};
        const double c = std::cos(angle), s = p.inverse ? -std::sin(angle) : std::sin(angle);
        const double a = v[a_at], b = v[b_at];
        v[a_at] = static_cast<float>(a * c - b * s);
        v[b_at] = static_cast<float>(b * c + a * s);
      }
    }
  }
}

void layer_norm(const float* x, const float* weight, const float* bias, int64_t m, int64_t n,
                float eps, float* y) {
  for (int64_t i = 0; i < m; ++i) {
    double mean = 0;
    for (int64_t j = 0; j < n; ++j) mean += x[i * n + j];
    mean /= static_cast<double>(n);
    double var = 0;
    for (int64_t j = 0; j < n; ++j) var += (x[i * n + j] - mean) * (x[i * n + j] - mean);
    var /= static_cast<double>(n);
    const double inv = 1.0 / std::sqrt(var + eps);
    for (int64_t j = 0; j < n; ++j) {
      y[i * n + j] =
          static_cast<float>((x[i * n + j] - mean) * inv * weight[j] + (bias ? bias[j] : 0.0));
    }
  }
}

void silu_mul(const float* gate_up, int64_t m, int64_t inter, float* out, float swiglu_limit) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < inter; ++j) {
      double g = gate_up[i * 2 * inter + j], u = gate_up[i * 2 * inter + inter + j];
      if (swiglu_limit > 0.0f) {  // V4: gate capped above, up clamped both ways
        g = std::min(g, double{swiglu_limit});
        u = std::clamp(u, -double{swiglu_limit}, double{swiglu_limit});
      }
      out[i * inter + j] = static_cast<float>(g / (1.0 + std::exp(-g)) * u);
    }
  }
}

void softmax(float* x, int64_t n) {
  double mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, double{x[i]});
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(x[i] - mx);
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(std::exp(x[i] - mx) / sum);
}

void embedding(const int32_t* ids, int64_t m, const Matrix& table, float* out) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < table.cols; ++j) out[i * table.cols + j] = matrix_at(table, ids[i], j);
  }
}

namespace {

// Element i of a KV cache of the given dtype, as f32.
float kv_at(const void* cache, DType dtype, int64_t i) {
  return dtype == DType::BF16 ? bf16_to_f32(static_cast<const uint16_t*>(cache)[i])
                              : static_cast<const float*>(cache)[i];
}

void kv_store(void* cache, DType dtype, int64_t i, float x) {
  if (dtype == DType::BF16) {
    static_cast<uint16_t*>(cache)[i] = f32_to_bf16(x);
  } else {
    static_cast<float*>(cache)[i] = x;
  }
}

}  // namespace

void write_kv(const float* k, const float* v, const int64_t* slot_mapping, int64_t num_tokens,
              const KVLayout& layout, void* k_cache, void* v_cache) {
  const int hd = layout.head_dim;
  for (int64_t t = 0; t < num_tokens; ++t) {
    if (slot_mapping[t] < 0) continue;
    for (int h = 0; h < layout.num_kv_heads; ++h) {
      const int64_t to = layout.row_offset(slot_mapping[t], h);
      const int64_t from = (t * layout.num_kv_heads + h) * hd;
      for (int d = 0; d < hd; ++d) {
        kv_store(k_cache, layout.dtype, to + d, k[from + d]);
        kv_store(v_cache, layout.dtype, to + d, v[from + d]);
      }
    }
  }
}

void paged_attention(const float* q, const void* k_cache, const void* v_cache,
                     const KVLayout& layout, const AttentionBatch& batch, int num_q_heads,
                     float scale, float* out) {
  const int hd = layout.head_dim, kvh = layout.num_kv_heads;
  const int group = num_q_heads / kvh;
  for (int s = 0; s < batch.num_seqs; ++s) {
    const int64_t q_begin = batch.query_start_loc[s], q_end = batch.query_start_loc[s + 1];
    const int64_t seq_len = batch.seq_lens[s], num_new = q_end - q_begin;
    const int32_t* table = batch.block_table(s);
    for (int64_t j = 0; j < num_new; ++j) {
      const int64_t last_key = seq_len - num_new + j;  // inclusive
      const int64_t first_key =
          batch.sliding_window > 0 ? std::max<int64_t>(0, last_key - batch.sliding_window + 1) : 0;
      for (int h = 0; h < num_q_heads; ++h) {
        const float* qv = q + ((q_begin + j) * num_q_heads + h) * hd;
        const int kv_head = h / group;
        // Element d of key t's row in a cache.
        auto at = [&](const void* cache, int64_t t, int d) {
          const int64_t slot =
              int64_t{table[t / layout.block_size]} * layout.block_size + t % layout.block_size;
          return kv_at(cache, layout.dtype, layout.row_offset(slot, kv_head) + d);
        };
        std::vector<double> scores(last_key - first_key + 1);
        double mx = -INFINITY;
        for (int64_t t = first_key; t <= last_key; ++t) {
          double dot = 0;
          for (int d = 0; d < hd; ++d) dot += double{qv[d]} * at(k_cache, t, d);
          scores[t - first_key] = dot * scale;
          mx = std::max(mx, scores[t - first_key]);
        }
        double sum = 0;
        for (double& sc : scores) sum += (sc = std::exp(sc - mx));
        float* o = out + ((q_begin + j) * num_q_heads + h) * hd;
        for (int d = 0; d < hd; ++d) {
          double acc = 0;
          for (int64_t t = first_key; t <= last_key; ++t)
            acc += scores[t - first_key] * at(v_cache, t, d);
          o[d] = static_cast<float>(acc / sum);
        }
      }
    }
  }
}

void write_mla_kv(const float* latent, const float* k_pe, const int64_t* slot_mapping,
                  int64_t num_tokens, const MLALayout& layout, void* cache, int64_t latent_stride,
                  int64_t pe_stride) {
  const int lora = layout.kv_lora_rank, rope = layout.rope_dim;
  if (latent_stride == 0) latent_stride = lora;
  if (pe_stride == 0) pe_stride = rope;
  for (int64_t t = 0; t < num_tokens; ++t) {
    if (slot_mapping[t] < 0) continue;
    if (layout.dtype == DType::F8E4M3) {  // fp8_ds_mla (ops.h MLALayout)
      auto* e = static_cast<uint8_t*>(cache) + slot_mapping[t] * layout.entry_bytes();
      for (int g = 0; g < lora / kMlaFp8Group; ++g) {
        const float* x = latent + t * latent_stride + g * kMlaFp8Group;
        float amax = 0.0f;
        for (int d = 0; d < kMlaFp8Group; ++d) amax = std::max(amax, std::fabs(x[d]));
        const float scale = amax > 0.0f ? amax / 448.0f : 1.0f;
        for (int d = 0; d < kMlaFp8Group; ++d)
          e[g * kMlaFp8Group + d] = f32_to_f8e4m3(x[d] / scale);
        std::memcpy(e + layout.fp8_scales_offset() + 4 * g, &scale, sizeof(float));
      }
      for (int d = 0; d < rope; ++d) {
        const uint16_t h = f32_to_bf16(k_pe[t * pe_stride + d]);
        std::memcpy(e + layout.fp8_rope_offset() + 2 * d, &h, sizeof(h));
      }
      continue;
    }
    const int64_t to = layout.entry_offset(slot_mapping[t]);
    for (int d = 0; d < lora; ++d)
      kv_store(cache, layout.dtype, to + d, latent[t * latent_stride + d]);
    for (int d = 0; d < rope; ++d)
      kv_store(cache, layout.dtype, to + lora + d, k_pe[t * pe_stride + d]);
  }
}

void mla_paged_attention(const float* q, const void* cache, const MLALayout& layout,
                         const AttentionBatch& batch, int num_heads, float scale, float* out,
                         const MlaStrides& strides) {
  const int lora = layout.kv_lora_rank, ed = layout.entry_dim();
  const int64_t q_tok = strides.q_token ? strides.q_token : int64_t{num_heads} * ed;
  const int64_t q_head = strides.q_head ? strides.q_head : ed;
  const int64_t o_tok = strides.out_token ? strides.out_token : int64_t{num_heads} * lora;
  const int64_t o_head = strides.out_head ? strides.out_head : lora;
  for (int s = 0; s < batch.num_seqs; ++s) {
    const int64_t q_begin = batch.query_start_loc[s], q_end = batch.query_start_loc[s + 1];
    const int64_t seq_len = batch.seq_lens[s], num_new = q_end - q_begin;
    const int32_t* table = batch.block_table(s);
    // The sequence's entries gathered in key order, as f32.
    std::vector<float> keys(static_cast<size_t>(seq_len) * ed);
    for (int64_t t = 0; t < seq_len; ++t) {
      const int64_t slot =
          int64_t{table[t / layout.block_size]} * layout.block_size + t % layout.block_size;
      for (int d = 0; d < ed; ++d)
        keys[t * ed + d] = kv_at(cache, layout.dtype, layout.entry_offset(slot) + d);
    }
    for (int64_t j = 0; j < num_new; ++j) {
      const int64_t last_key = seq_len - num_new + j;  // inclusive
      for (int h = 0; h < num_heads; ++h) {
        const float* qv = q + (q_begin + j) * q_tok + h * q_head;
        std::vector<double> p(last_key + 1);
        double mx = -INFINITY;
        for (int64_t t = 0; t <= last_key; ++t) {
          double dot = 0;
          for (int d = 0; d < ed; ++d) dot += double{qv[d]} * keys[t * ed + d];
          p[t] = dot * scale;
          mx = std::max(mx, p[t]);
        }
        double sum = 0;
        for (double& x : p) sum += (x = std::exp(x - mx));
        float* o = out + (q_begin + j) * o_tok + h * o_head;
        for (int d = 0; d < lora; ++d) {
          double acc = 0;
          for (int64_t t = 0; t <= last_key; ++t) acc += p[t] * keys[t * ed + d];
          o[d] = static_cast<float>(acc / sum);
        }
      }
    }
  }
}

}  // namespace pagoda::ops::ref
