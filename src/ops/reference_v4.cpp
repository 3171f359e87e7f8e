// Scalar twins of the DeepSeek V4 attention ops (ops.h "DeepSeek V4"
// section) and of the MXFP4 indexer key codec: written from the spec's
// formulas (§0.4 fp8_sim / fp4_sim, §3.2.2), with log2 / ceil and a nearest
// grid search where the fast code uses frexp and thresholds, and attention
// in double with its two-pass softmax.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "ops/reference.h"

namespace pagoda::ops::ref {

namespace {

// The spec's scale rule 2^ceil(log2(q)), q > 0, as an exponent.
int ceil_log2(double q) { return static_cast<int>(std::ceil(std::log2(q))); }

// e2m1: the nearest of the grid, ties to the even code; sign kept (-0 too).
const double kE2m1Grid[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
uint8_t e2m1_nearest(double v) {
  const double a = std::min(std::fabs(v), 6.0);
  int best = 0;
  for (int c = 1; c < 8; ++c) {
    const double dc = std::fabs(a - kE2m1Grid[c]), db = std::fabs(a - kE2m1Grid[best]);
    if (dc < db || (dc == db && c % 2 == 0)) best = c;
  }
  return static_cast<uint8_t>(std::signbit(v) ? best | 8 : best);
}
double e2m1_value(uint8_t code) {
  return (code & 8 ? -1.0 : 1.0) * kE2m1Grid[code & 7];
}

}  // namespace

float indexer_mxfp4_at(const void* cache, const IndexerLayout& layout, int64_t slot, int d) {
  const auto* page = static_cast<const uint8_t*>(cache) + slot / layout.block_size * layout.page_step();
  const int offset = static_cast<int>(slot % layout.block_size);
  const uint8_t byte = page[layout.mxfp4_values_offset(offset) + d / 2];
  const uint8_t code = d % 2 == 0 ? byte & 0xf : byte >> 4;
  const int k = page[layout.mxfp4_scales_offset(offset) + d / kFp4Block] - 127;
  return static_cast<float>(std::ldexp(e2m1_value(code), k));
}

void write_indexer_mxfp4(const float* x, const IndexerLayout& layout, int64_t slot, void* cache) {
  auto* page = static_cast<uint8_t*>(cache) + slot / layout.block_size * layout.page_step();
  const int offset = static_cast<int>(slot % layout.block_size);
  for (int b = 0; b < layout.head_dim / kFp4Block; ++b) {
    double amax = 0;
    for (int d = 0; d < kFp4Block; ++d) amax = std::max(amax, std::fabs(double{x[b * 32 + d]}));
    const int k = ceil_log2(std::max(amax, 6.0 * std::ldexp(1.0, -126)) / 6.0);
    page[layout.mxfp4_scales_offset(offset) + b] = static_cast<uint8_t>(k + 127);
    for (int d = 0; d < kFp4Block; ++d) {
      const int i = b * kFp4Block + d;
      const uint8_t code = e2m1_nearest(std::ldexp(double{x[i]}, -k));
      uint8_t& byte = page[layout.mxfp4_values_offset(offset) + i / 2];
      byte = i % 2 == 0 ? static_cast<uint8_t>((byte & 0xf0) | code)
                        : static_cast<uint8_t>((byte & 0x0f) | code << 4);
    }
  }
}

void write_v4_entries(const float* x, const int64_t* slots, int64_t n, const V4EntryLayout& layout,
                      void* cache, int64_t x_stride) {
  if (x_stride == 0) x_stride = layout.head_dim;
  auto* base = static_cast<uint8_t*>(cache);
  const int nope = layout.nope_dim();
  for (int64_t i = 0; i < n; ++i) {
    if (slots[i] < 0) continue;
    const float* v = x + i * x_stride;
    uint8_t* e = base + layout.entry_offset(slots[i]);
    for (int d = 0; d < layout.head_dim; ++d) {
      if (layout.dtype == DType::F32) {
        std::memcpy(e + 4 * d, &v[d], 4);
      } else if (layout.dtype == DType::BF16 || d >= nope) {  // bf16, or the fp8 entry's rope
        const uint16_t h = f32_to_bf16(v[d]);
        std::memcpy(e + (layout.dtype == DType::BF16 ? 2 * d : nope + 2 * (d - nope)), &h, 2);
      }
    }
    if (layout.dtype != DType::F8E4M3) continue;
    uint8_t* trailer = base + layout.fp8_scales_offset(slots[i]);
    std::fill(trailer, trailer + layout.fp8_trailer_bytes(), uint8_t{0});
    for (int g = 0; g * kV4Fp8Group < nope; ++g) {
      const int d0 = g * kV4Fp8Group, d1 = std::min(nope, d0 + kV4Fp8Group);
      double amax = 0;
      for (int d = d0; d < d1; ++d) amax = std::max(amax, std::fabs(double{v[d]}));
      const int k = ceil_log2(std::max(amax, 1e-4) / 448.0);
      trailer[g] = static_cast<uint8_t>(k + 127);
      for (int d = d0; d < d1; ++d) {
        const double q = std::clamp(std::ldexp(double{v[d]}, -k), -448.0, 448.0);
        e[d] = f32_to_f8e4m3(static_cast<float>(q));  // q is an f32 value (exact scaling)
      }
    }
  }
}

void read_v4_entry(const void* cache, const V4EntryLayout& layout, int64_t slot, float* out) {
  const auto* e = static_cast<const uint8_t*>(cache) + layout.entry_offset(slot);
  const int nope = layout.nope_dim();
  for (int d = 0; d < layout.head_dim; ++d) {
    if (layout.dtype == DType::F32) {
      std::memcpy(&out[d], e + 4 * d, 4);
    } else if (layout.dtype == DType::BF16 || d >= nope) {
      uint16_t h;
      std::memcpy(&h, e + (layout.dtype == DType::BF16 ? 2 * d : nope + 2 * (d - nope)), 2);
      out[d] = bf16_to_f32(h);
    } else {
      const int k = static_cast<const uint8_t*>(cache)[layout.fp8_scales_offset(slot) +
                                                       d / kV4Fp8Group] - 127;
      out[d] = static_cast<float>(std::ldexp(double{f8e4m3_to_f32(e[d])}, k));
    }
  }
}

void v4_sparse_attention(const float* q, int64_t num_tokens, int num_heads,
                         const void* window_cache, const V4EntryLayout& window_layout,
                         const int32_t* window_slots, int window_count,
                         const void* comp_cache, const V4EntryLayout& comp_layout,
                         const int32_t* comp_slots, int comp_count,
                         const float* sink, float scale, float* out) {
  const int dv = window_layout.head_dim;
  for (int64_t t = 0; t < num_tokens; ++t) {
    // The token's entries, dequantised, window list then compressed list.
    std::vector<std::vector<float>> keys;
    for (int i = 0; i < window_count; ++i) {
      const int32_t slot = window_slots[t * window_count + i];
      if (slot < 0) continue;
      keys.emplace_back(dv);
      ref::read_v4_entry(window_cache, window_layout, slot, keys.back().data());
    }
    for (int i = 0; i < comp_count; ++i) {
      const int32_t slot = comp_slots[t * comp_count + i];
      if (slot < 0) continue;
      keys.emplace_back(dv);
      ref::read_v4_entry(comp_cache, comp_layout, slot, keys.back().data());
    }
    for (int h = 0; h < num_heads; ++h) {
      const float* qh = q + (t * num_heads + h) * dv;
      float* o = out + (t * num_heads + h) * dv;
      std::vector<double> s(keys.size());
      double mx = double{sink[h]};
      for (size_t j = 0; j < keys.size(); ++j) {
        double dot = 0;
        for (int d = 0; d < dv; ++d) dot += double{qh[d]} * keys[j][d];
        mx = std::max(mx, s[j] = dot * scale);
      }
      if (keys.empty()) {  // nothing to attend to: zeros, whatever the sink
        std::fill(o, o + dv, 0.0f);
        continue;
      }
      double denom = std::exp(double{sink[h]} - mx);  // 0 for a -inf sink
      for (double& x : s) denom += (x = std::exp(x - mx));
      for (int d = 0; d < dv; ++d) {
        double acc = 0;
        for (size_t j = 0; j < keys.size(); ++j) acc += s[j] * keys[j][d];
        o[d] = static_cast<float>(acc / denom);
      }
    }
  }
}

}  // namespace pagoda::ops::ref
