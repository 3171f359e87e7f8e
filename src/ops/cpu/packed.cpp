// Packing bf16 weights into panels (ops/packed.h), and the portable linear
// over packed weights for ISAs without a native kernel.
#include "ops/packed.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/parallel.h"
#include "ops/cpu/kernels.h"
#include "ops/cpu/quant_kernels.h"

namespace pagoda::ops {

bool packed_bf16_is_native() {
  const cpu::KernelTable& kt = cpu::active_kernels();
  return kt.linear_bf16_packed != nullptr || kt.linear_bf16_packed_f32 != nullptr;
}
bool packed_i8_is_native() { return cpu::active_quant_kernels().linear_i8_packed != nullptr; }

Matrix pack_matrix(const Matrix& src, void* out) {
  PAGODA_CHECK((src.dtype == DType::BF16 || src.dtype == DType::I8) && !src.packed,
               "pack_matrix: {} weights{}", dtype_name(src.dtype),
               src.packed ? " (already packed)" : "");
  const int64_t per_word = packed_per_word(src.dtype);
  PAGODA_CHECK(src.cols % per_word == 0, "pack_matrix: {} cols of {} (not a multiple of {})",
               src.cols, dtype_name(src.dtype), per_word);
  // A word (2 bf16 or 4 int8 inputs) is the unit in both layouts.
  const int64_t words_per_row = src.cols / per_word;
  const auto* in = static_cast<const uint32_t*>(src.data);
  auto* words = static_cast<uint32_t*>(out);
  // The AVX-512 gather packer where the selected kernels are AVX-512 BF16
  // ones (it needs AVX-512F); the plain loop elsewhere.
  [[maybe_unused]] const bool gather = cpu::active_kernels().linear_bf16_packed != nullptr;
  const int64_t full = packed_cols(src.dtype);
  parallel_for(packed_panels(src.rows, src.dtype), 1, [&](int64_t p0, int64_t p1) {
    for (int64_t panel = p0; panel < p1; ++panel) {
      uint32_t* dst = words + panel * words_per_row * full;
      const int64_t row0 = panel * full;
      const int64_t count = std::min(full, src.rows - row0);
      const int64_t cols = packed_panel_cols(src.rows, panel, src.dtype);
#if defined(__x86_64__)  // the only gather packer: avx512bf16's
      if (gather) {
        cpu::avx512bf16_impl::pack_panel(in + row0 * words_per_row, count, words_per_row, cols,
                                         dst);
        continue;
      }
#endif
      // memcpy: a checkpoint's bf16 tensor may be only 2-byte aligned.
      for (int64_t p = 0; p < words_per_row; ++p) {
        for (int64_t c = 0; c < cols; ++c) {
          uint32_t word = 0;
          if (c < count) std::memcpy(&word, in + (row0 + c) * words_per_row + p, sizeof word);
          dst[p * cols + c] = word;
        }
      }
    }
  });
  Matrix packed = src;
  packed.data = out;
  packed.packed = true;
  return packed;
}

namespace cpu {

void linear_packed_portable(const float* x, int64_t m, const Matrix& w, int64_t ldy,
                            const float* bias, float* y, int64_t p0, int64_t p1) {
  const int64_t k = w.cols, words_per_row = k / 2;
  const auto* words = static_cast<const uint16_t*>(w.data);
  for (int64_t panel = p0; panel < p1; ++panel) {
    const uint16_t* base = words + panel * words_per_row * kPackedColsBf16 * 2;
    const int64_t c0 = panel * kPackedColsBf16;
    const int64_t cols = w.rows - c0 < kPackedColsBf16 ? w.rows - c0 : kPackedColsBf16;
    const int64_t width = packed_panel_cols(w.rows, panel, DType::BF16);
    for (int64_t r = 0; r < m; ++r) {
      float acc[kPackedColsBf16] = {};
      const float* xr = x + r * k;
      for (int64_t p = 0; p < words_per_row; ++p) {
        const uint16_t* pair_row = base + p * width * 2;
        for (int64_t c = 0; c < width; ++c) {
          acc[c] += xr[2 * p] * bf16_to_f32(pair_row[2 * c]) +
                    xr[2 * p + 1] * bf16_to_f32(pair_row[2 * c + 1]);
        }
      }
      for (int64_t c = 0; c < cols; ++c)
        y[r * ldy + c0 + c] = bias ? acc[c] + bias[c0 + c] : acc[c];
    }
  }
}

}  // namespace cpu
}  // namespace pagoda::ops
