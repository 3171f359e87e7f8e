// ops.h write_v4_entries / read_v4_entry: DeepSeek V4's window and
// compressed entry caches (f32, bf16, and FlashMLA's 584-byte fp8 entry:
// per page all bodies, then all scale trailers).
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/parallel.h"
#include "ops/ops.h"

namespace pagoda::ops {
namespace {

void check_layout(const V4EntryLayout& l, const char* op) {
  PAGODA_CHECK(l.entries_per_page > 0 && l.head_dim > 0 && l.rope_dim >= 0 &&
                   l.rope_dim <= l.head_dim &&
                   (l.dtype == DType::F32 || l.dtype == DType::BF16 || l.dtype == DType::F8E4M3) &&
                   (l.page_bytes == 0 ||
                    l.page_bytes >= int64_t{l.entries_per_page} * l.entry_bytes()),
               "{}: entries_per_page {} head_dim {} rope_dim {} dtype {} page_bytes {}", op,
               l.entries_per_page, l.head_dim, l.rope_dim, dtype_name(l.dtype), l.page_bytes);
}

// The UE8M0 exponent k of one group's scale 2^k: the smallest power of two
// >= max(amax, 1e-4) / 448 (computed in double, as the reference tool:
// frexp's mantissa is exactly 0.5 for a power of two; no f32 amax puts the
// quotient within rounding of one).
int fp8_group_exponent(const float* x, int n) {
  float amax = 0.0f;
  for (int d = 0; d < n; ++d) amax = std::fmax(amax, std::fabs(x[d]));
  int e;
  const double m = std::frexp(std::fmax(double{amax}, 1e-4) / 448.0, &e);
  return m == 0.5 ? e - 1 : e;
}

void write_entry(const float* x, const V4EntryLayout& l, int64_t slot, char* cache) {
  char* dst = cache + l.entry_offset(slot);
  if (l.dtype == DType::F32) {
    std::memcpy(dst, x, sizeof(float) * static_cast<size_t>(l.head_dim));
    return;
  }
  if (l.dtype == DType::BF16) {
    for (int d = 0; d < l.head_dim; ++d) {
      const uint16_t h = f32_to_bf16(x[d]);
      std::memcpy(dst + 2 * d, &h, 2);
    }
    return;
  }
  const int nope = l.nope_dim();
  auto* codes = reinterpret_cast<uint8_t*>(dst);
  auto* trailer = reinterpret_cast<uint8_t*>(cache + l.fp8_scales_offset(slot));
  std::memset(trailer, 0, static_cast<size_t>(l.fp8_trailer_bytes()));
  for (int g = 0, d0 = 0; d0 < nope; ++g, d0 += kV4Fp8Group) {
    const int n = nope - d0 < kV4Fp8Group ? nope - d0 : kV4Fp8Group;
    const int k = fp8_group_exponent(x + d0, n);
    trailer[g] = static_cast<uint8_t>(k + 127);
    // x / 2^k exact (k >= -22 from the 1e-4 floor, <= 120 below FLT_MAX);
    // |x / 2^k| <= 448, so f32_to_f8e4m3 never saturates.
    for (int d = d0; d < d0 + n; ++d) codes[d] = f32_to_f8e4m3(std::ldexp(x[d], -k));
  }
  for (int d = 0; d < l.rope_dim; ++d) {
    const uint16_t h = f32_to_bf16(x[nope + d]);
    std::memcpy(dst + nope + 2 * d, &h, 2);
  }
}

}  // namespace

void write_v4_entries(const float* x, const int64_t* slots, int64_t n, const V4EntryLayout& layout,
                      void* cache, int64_t x_stride) {
  check_layout(layout, "write_v4_entries");
  if (x_stride == 0) x_stride = layout.head_dim;
  // A few hundred values per entry: scalar conversion is cheap next to the
  // projection that made them; entries are split across threads.
  parallel_for(n, 16, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      if (slots[i] < 0) continue;  // padding
      write_entry(x + i * x_stride, layout, slots[i], static_cast<char*>(cache));
    }
  });
}

void read_v4_entry(const void* cache, const V4EntryLayout& layout, int64_t slot, float* out) {
  check_layout(layout, "read_v4_entry");
  const char* src = static_cast<const char*>(cache) + layout.entry_offset(slot);
  if (layout.dtype == DType::F32) {
    std::memcpy(out, src, sizeof(float) * static_cast<size_t>(layout.head_dim));
    return;
  }
  if (layout.dtype == DType::BF16) {
    for (int d = 0; d < layout.head_dim; ++d) {
      uint16_t h;
      std::memcpy(&h, src + 2 * d, 2);
      out[d] = bf16_to_f32(h);
    }
    return;
  }
  const int nope = layout.nope_dim();
  const auto* codes = reinterpret_cast<const uint8_t*>(src);
  const auto* trailer =
      reinterpret_cast<const uint8_t*>(cache) + layout.fp8_scales_offset(slot);
  for (int d = 0; d < nope; ++d)
    out[d] = f8e4m3_to_f32(codes[d]) * f8e8m0_to_f32(trailer[d / kV4Fp8Group]);
  for (int d = 0; d < layout.rope_dim; ++d) {
    uint16_t h;
    std::memcpy(&h, src + nope + 2 * d, 2);
    out[nope + d] = bf16_to_f32(h);
  }
}

}  // namespace pagoda::ops
