// The int8 pieces quant_impl.h asks for, for NEON. No include guard:
// quant_neon.cpp includes it once per dot-product instruction, inside a
// namespace that defines PAGODA_QTARGET and
//   dot16(acc, x, w): acc (4 x int32) plus the exact dot products of 16
//   activation and 16 weight bytes, spread over its lanes in any way.
// The tile shape is AVX-512's (32 vector registers on both).

// 4 x 4 keeps 16 accumulators + 4 x rows + a weight row + a product;
// a lone row (decode) streams 8 weight rows.
constexpr int kRowTile = 4, kColTile = 4, kSingleRowCols = 8;

// acc[r][c] += the dot products of 16 bytes of R x rows and C w rows.
template <int R, int C>
PAGODA_QTARGET inline void dot_step(const int8_t* x, int64_t x_stride, const int8_t* w,
                                    int64_t w_stride, int32x4_t (&acc)[R][C]) {
  int8x16_t xv[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) xv[r] = vld1q_s8(x + r * x_stride);
#pragma GCC unroll 16
  for (int c = 0; c < C; ++c) {
    const int8x16_t wv = vld1q_s8(w + c * w_stride);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) acc[r][c] = dot16(acc[r][c], xv[r], wv);
  }
}

template <int R, int C>
PAGODA_QTARGET inline void dot_tile(const int8_t* x, const int8_t* w, int64_t k,
                                    const int32_t* /*row_sums*/, int32_t (&out)[R][C]) {
  int32x4_t acc[R][C];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) acc[r][c] = vdupq_n_s32(0);
  }
  int64_t i = 0;
  for (; i + 16 <= k; i += 16) {
    dot_step<R, C>(x + i, k, w + i, k, acc);
    // Decode streams C weight rows at once: ask for the next tile's rows
    // (one 64-byte line per row every 4 steps) as the x86 kernels do.
    if constexpr (R == 1) {
      if (i % 64 == 0) {
#pragma GCC unroll 16
        for (int c = 0; c < C; ++c) __builtin_prefetch(w + (C + c) * k + i, 0, 1);
      }
    }
  }
  if (i < k) {  // tail: zero-padded copies
    const auto t = static_cast<size_t>(k - i);
    int8_t xt[R][16] = {}, wt[C][16] = {};
    for (int r = 0; r < R; ++r) std::memcpy(xt[r], x + r * k + i, t);
    for (int c = 0; c < C; ++c) std::memcpy(wt[c], w + c * k + i, t);
    dot_step<R, C>(&xt[0][0], 16, &wt[0][0], 16, acc);
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) out[r][c] = vaddvq_s32(acc[r][c]);
  }
}

PAGODA_QTARGET inline float row_amax(const float* x, int64_t k) {
  float32x4_t m = vdupq_n_f32(0.0f);
  int64_t i = 0;
  for (; i + 4 <= k; i += 4) m = vmaxq_f32(m, vabsq_f32(vld1q_f32(x + i)));
  float r = vmaxvq_f32(m);
  for (; i < k; ++i) r = std::fabs(x[i]) > r ? std::fabs(x[i]) : r;
  return r;
}

// fcvtns rounds half to even, as nearbyint does in the default mode; the
// values are within [-127, 127], so the narrowing never saturates.
PAGODA_QTARGET inline void quantize_row(const float* x, int64_t k, float inv, int8_t* q) {
  const float32x4_t s = vdupq_n_f32(inv);
  int64_t i = 0;
  for (; i + 8 <= k; i += 8) {
    const int32x4_t lo = vcvtnq_s32_f32(vmulq_f32(vld1q_f32(x + i), s));
    const int32x4_t hi = vcvtnq_s32_f32(vmulq_f32(vld1q_f32(x + i + 4), s));
    vst1_s8(q + i, vqmovn_s16(vcombine_s16(vqmovn_s32(lo), vqmovn_s32(hi))));
  }
  for (; i < k; ++i) q[i] = static_cast<int8_t>(std::nearbyint(x[i] * inv));
}
