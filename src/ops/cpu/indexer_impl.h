// DeepSeek V3.2 lightning-indexer scores for one ISA (included by
// kernels_impl.h): I(j) = sum_h w_h * ReLU(q_h . k_j) for a run of keys.
//
// The query is transposed ([dim][hp]) so heads lie along the vector lanes:
// each key element is broadcast and multiplied into NV head vectors at once,
// for NK keys, with no horizontal sums until the key's last step (one vsum
// per key). A score depends only on its q, w and key: NK (the register
// blocking) never changes a key's chain, so scores do not depend on which
// keys share a block, the tiling or the batch.
#ifndef PAGODA_ISA
#error "included by kernels_impl.h"
#endif

// NK keys x NV head vectors (heads h0 ..): dot products over dim, then
// tot[c] += ReLU(dot) * w per head lane.
template <int NK, int NV>
PAGODA_TARGET inline void indexer_group(const float* qT, int hp, const float* w, const float* k,
                                        int dim, Vec* tot) {
  Vec acc[NK][NV];
#pragma GCC unroll 4
  for (int c = 0; c < NK; ++c) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[c][v] = vzero();
  }
  for (int d = 0; d < dim; ++d) {
    Vec qv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) qv[v] = vload(qT + int64_t{d} * hp + v * kLanes);
#pragma GCC unroll 4
    for (int c = 0; c < NK; ++c) {
      const Vec kc = vset1(k[int64_t{c} * dim + d]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[c][v] = vfma(kc, qv[v], acc[c][v]);
    }
  }
#pragma GCC unroll 4
  for (int c = 0; c < NK; ++c) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v)
      tot[c] = vfma(vmax(acc[c][v], vzero()), vload(w + v * kLanes), tot[c]);
  }
}

// NK keys' scores: head vectors in groups of 4, then singles.
template <int NK>
PAGODA_TARGET inline void indexer_keys(const float* qT, const float* w, int hp, const float* k,
                                       int dim, float* s) {
  Vec tot[NK];
#pragma GCC unroll 4
  for (int c = 0; c < NK; ++c) tot[c] = vzero();
  int h = 0;
  for (; h + 4 * kLanes <= hp; h += 4 * kLanes) indexer_group<NK, 4>(qT + h, hp, w + h, k, dim, tot);
  for (; h < hp; h += kLanes) indexer_group<NK, 1>(qT + h, hp, w + h, k, dim, tot);
#pragma GCC unroll 4
  for (int c = 0; c < NK; ++c) s[c] = vsum(tot[c]);
}

PAGODA_TARGET void indexer_scores(const float* qT, const float* w, int hp, const float* k,
                                  int count, int dim, float* s) {
  // Keys per register block: 4 x 4 accumulators on AVX-512's 32 registers,
  // 2 x 4 on the 16 of AVX2 (and the scalar build's arrays).
  constexpr int kKeys = kLanes >= 16 ? 4 : 2;
  int j = 0;
  for (; j + kKeys <= count; j += kKeys)
    indexer_keys<kKeys>(qT, w, hp, k + int64_t{j} * dim, dim, s + j);
  for (; j < count; ++j) indexer_keys<1>(qT, w, hp, k + int64_t{j} * dim, dim, s + j);
}

// A page's keys as f32 rows (KernelTable::indexer_widen_keys). fp8:
// vload_e4m3 gives value / 256 exactly and scale * 256 is exact (scale <=
// FLT_MAX / 448), so the product rounds the same real number as value *
// scale.
// mxfp4: a table lookup per value (the 16 signed e2m1 values) times the
// block's power of two, exact; a key's 128 lookups are little next to its
// num_heads * 128 score FMAs, so this stays scalar.
PAGODA_TARGET void indexer_widen_keys(const char* page, int rows, int dim, int block_size,
                                      bool fp8, bool mxfp4, float* tile) {
  if (mxfp4) {
    static constexpr float kE2m1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                        -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
    const auto* bytes = reinterpret_cast<const uint8_t*>(page);
    const uint8_t* scales = bytes + int64_t{block_size} * (dim / 2);
    for (int r = 0; r < rows; ++r) {
      float* dst = tile + int64_t{r} * dim;
      const uint8_t* v = bytes + int64_t{r} * (dim / 2);
      const uint8_t* s = scales + int64_t{r} * (dim / kFp4Block);
      for (int d = 0; d < dim; d += 2) {
        const float sc = f8e8m0_to_f32(s[d / kFp4Block]);
        dst[d] = kE2m1[v[d / 2] & 0xf] * sc;
        dst[d + 1] = kE2m1[v[d / 2] >> 4] * sc;
      }
    }
    return;
  }
  for (int r = 0; r < rows; ++r) {
    float* dst = tile + int64_t{r} * dim;
    Vec vs = vset1(1.0f);
    if (fp8) {
      float sc;
      __builtin_memcpy(&sc, page + int64_t{block_size} * dim + 4 * r, sizeof(float));
      vs = vset1(sc * 256.0f);
    }
    const auto* b8 = reinterpret_cast<const uint8_t*>(page) + int64_t{r} * dim;
    const auto* b16 = reinterpret_cast<const uint16_t*>(page) + int64_t{r} * dim;
    int d = 0;
    for (; d + kLanes <= dim; d += kLanes)
      vstore(dst + d, fp8 ? vmul(vload_e4m3(b8 + d), vs) : vload(b16 + d));
    if (d < dim) {
      const int t = dim - d;
      vstore_tail(dst + d, fp8 ? vmul(vload_e4m3_tail(b8 + d, t), vs) : vload_tail(b16 + d, t), t);
    }
  }
}
