// Manifold-constrained hyper-connections (mHC, DeepSeek V4; spec §3.2.1):
// the residual stream is hc parallel streams X [hc, dim] per token instead
// of one vector. Around each sublayer F, learned token-dependent
// coefficients mix the streams into F's input (pre), spread F's output
// back over them (post) and mix the streams with each other through a
// matrix C pushed towards doubly stochastic by Sinkhorn iterations (so the
// residual path neither grows nor vanishes with depth). The final head
// collapses the streams with pre-only coefficients.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/weights.h"
#include "ops/ops.h"

namespace pagoda {

struct HyperConnectionParams {
  int64_t hc = 1;       // hc_mult: number of streams
  int64_t dim = 0;      // hidden_size
  int64_t sinkhorn_iters = 1;
  double hc_eps = 1e-6;
  double norm_eps = 1e-6;  // rms_norm_eps: the flattened streams' RMS
};

// One sublayer's connection: `prefix` + "_fn" [(2 + hc) hc, hc dim],
// "_base" [(2 + hc) hc], "_scale" [3] (e.g. layers.0.hc_attn), all f32.
// With head = true, the head's pre-only form: "_fn" [hc, hc dim],
// "_base" [hc], "_scale" [1] (hc_head).
class HyperConnection {
 public:
  HyperConnection() = default;
  HyperConnection(WeightStore& weights, const std::string& prefix,
                  const HyperConnectionParams& p, bool head = false);

  // For each of `tokens` rows of streams X [tokens, hc, dim]: the sublayer
  // input y [tokens, dim] = sum_k pre_k X[k], and (not for a head) the
  // coefficients post [tokens, hc] and C [tokens, hc, hc] (C[a][b]: from
  // stream a to stream b) that expand() needs.
  void collapse(const float* X, int64_t tokens, float* y, std::vector<float>* post = nullptr,
                std::vector<float>* C = nullptr);
  // X_out[b] = post_b o + sum_a C[a][b] X[a], per token. X_out must not
  // alias X.
  void expand(const float* o, const float* X, int64_t tokens, const std::vector<float>& post,
              const std::vector<float>& C, float* X_out) const;

 private:
  HyperConnectionParams p_;
  bool head_ = false;
  ops::Matrix fn_;
  const float* base_ = nullptr;
  const float* scale_ = nullptr;
  std::vector<float> mix_;  // [tokens, rows of fn]
};

}  // namespace pagoda
