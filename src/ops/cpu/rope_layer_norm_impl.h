// The RoPE-slice and LayerNorm kernels (ops::rope with RopeParams,
// ops::layer_norm), included by kernels_impl.h inside its per-ISA
// anonymous namespace and written against its vector interface.
#ifndef PAGODA_ISA
#error "include through kernels_impl.h"
#endif

static_assert(kLanes % 2 == 0, "interleaved RoPE pairs must not straddle vectors");

PAGODA_TARGET void rope_slice(float* v, const float* cs, const float* sn, int rot_dim,
                              bool interleaved) {
  if (interleaved) {
    // Vectors start at even elements, so every pair sits inside one.
    int j = 0;
    for (; j + kLanes <= rot_dim; j += kLanes) {
      const Vec x = vload(v + j);
      vstore(v + j, vfma(vswap_pairs(x), vload(sn + j), vmul(x, vload(cs + j))));
    }
    if (j < rot_dim) {  // an even count: whole pairs
      const int t = rot_dim - j;
      const Vec x = vload_tail(v + j, t);
      vstore_tail(v + j, vfma(vswap_pairs(x), vload_tail(sn + j, t), vmul(x, vload_tail(cs + j, t))),
                  t);
    }
    return;
  }
  const int half = rot_dim / 2;
  float* lo = v;
  float* hi = v + half;
  const Vec minus_one = vset1(-1.0f);
  int i = 0;
  for (; i + kLanes <= half; i += kLanes) {
    const Vec a = vload(lo + i), b = vload(hi + i), c = vload(cs + i), s = vload(sn + i);
    vstore(lo + i, vfma(vmul(b, minus_one), s, vmul(a, c)));  // a c - b s
    vstore(hi + i, vfma(a, s, vmul(b, c)));                    // b c + a s
  }
  if (i < half) {
    const int t = half - i;
    const Vec a = vload_tail(lo + i, t), b = vload_tail(hi + i, t);
    const Vec c = vload_tail(cs + i, t), s = vload_tail(sn + i, t);
    vstore_tail(lo + i, vfma(vmul(b, minus_one), s, vmul(a, c)), t);
    vstore_tail(hi + i, vfma(a, s, vmul(b, c)), t);
  }
}

// Two passes over the row (mean, then the mean of squared deviations):
// the one-pass E[x^2] - mean^2 loses the variance to cancellation when
// |mean| >> std.
PAGODA_TARGET void layer_norm_rows(const float* x, const float* weight, const float* bias,
                                   int64_t n, float eps, float* y, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    Vec sum = vzero();
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) sum = vadd(sum, vload(xr + i));
    if (i < n) sum = vadd(sum, vload_tail(xr + i, static_cast<int>(n - i)));
    const float mean = vsum(sum) / static_cast<float>(n);
    const Vec minus_mean = vset1(-mean);
    Vec sq = vzero();
    for (i = 0; i + kLanes <= n; i += kLanes) {
      const Vec d = vadd(vload(xr + i), minus_mean);
      sq = vfma(d, d, sq);
    }
    float tail = 0.0f;  // scalar: padded lanes would add mean^2
    for (; i < n; ++i) tail += (xr[i] - mean) * (xr[i] - mean);
    const float inv = 1.0f / __builtin_sqrtf((vsum(sq) + tail) / static_cast<float>(n) + eps);
    const Vec inv_v = vset1(inv);
    for (i = 0; i + kLanes <= n; i += kLanes) {
      const Vec d = vmul(vadd(vload(xr + i), minus_mean), inv_v);
      vstore(yr + i, vfma(d, vload(weight + i), bias ? vload(bias + i) : vzero()));
    }
    if (i < n) {
      const int t = static_cast<int>(n - i);
      const Vec d = vmul(vadd(vload_tail(xr + i, t), minus_mean), inv_v);
      vstore_tail(yr + i, vfma(d, vload_tail(weight + i, t), bias ? vload_tail(bias + i, t) : vzero()),
                  t);
    }
  }
}
