#include "models/mhc.h"

#include <cmath>

#include "core/error.h"

namespace pagoda {

namespace {

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

}  // namespace

HyperConnection::HyperConnection(WeightStore& weights, const std::string& prefix,
                                 const HyperConnectionParams& p, bool head)
    : p_(p), head_(head) {
  const int64_t rows = head ? p.hc : (2 + p.hc) * p.hc;
  fn_ = weights.matrix(prefix + "_fn", rows, p.hc * p.dim);
  if (fn_.dtype != DType::F32) {
    // The mixing logits decide every stream's weight: kept in f32, as the
    // checkpoint stores them.
    throw_input_error("{}_fn: expected F32 (mHC weights are fp32), got {}", prefix,
                      dtype_name(fn_.dtype));
  }
  base_ = weights.vector(prefix + "_base", rows);
  scale_ = weights.vector(prefix + "_scale", head ? 1 : 3);
}

void HyperConnection::collapse(const float* X, int64_t tokens, float* y, std::vector<float>* post,
                               std::vector<float>* C) {
  const int64_t hc = p_.hc, dim = p_.dim, n = hc * dim, rows = fn_.rows;
  mix_.resize(static_cast<size_t>(tokens * rows));
  ops::linear(X, tokens, fn_, nullptr, mix_.data());
  if (post != nullptr) post->resize(static_cast<size_t>(tokens * hc));
  if (C != nullptr) C->resize(static_cast<size_t>(tokens * hc * hc));
  std::vector<double> pre(hc), c(hc * hc);
  for (int64_t t = 0; t < tokens; ++t) {
    const float* u = X + t * n;
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += double{u[i]} * u[i];
    const double r = 1.0 / std::sqrt(ss / static_cast<double>(n) + p_.norm_eps);
    const float* m = mix_.data() + t * rows;
    for (int64_t k = 0; k < hc; ++k) {
      pre[k] = sigmoid(m[k] * r * scale_[0] + base_[k]) + p_.hc_eps;
    }
    if (!head_) {
      for (int64_t k = 0; k < hc; ++k) {
        (*post)[t * hc + k] =
            static_cast<float>(2.0 * sigmoid(m[hc + k] * r * scale_[1] + base_[hc + k]));
      }
      // C: row softmax + eps, then columns normalised, then (iters - 1)
      // rounds of rows then columns, every divisor + eps (spec §3.2.1).
      for (int64_t a = 0; a < hc; ++a) {
        double mx = -INFINITY;
        for (int64_t b = 0; b < hc; ++b) {
          const int64_t j = 2 * hc + a * hc + b;
          c[a * hc + b] = m[j] * r * scale_[2] + base_[j];
          mx = std::max(mx, c[a * hc + b]);
        }
        double sum = 0;
        for (int64_t b = 0; b < hc; ++b) sum += (c[a * hc + b] = std::exp(c[a * hc + b] - mx));
        for (int64_t b = 0; b < hc; ++b) c[a * hc + b] = c[a * hc + b] / sum + p_.hc_eps;
      }
      auto normalise_columns = [&] {
        for (int64_t b = 0; b < hc; ++b) {
          double s = 0;
          for (int64_t a = 0; a < hc; ++a) s += c[a * hc + b];
          for (int64_t a = 0; a < hc; ++a) c[a * hc + b] /= s + p_.hc_eps;
        }
      };
      normalise_columns();
      for (int64_t it = 1; it < p_.sinkhorn_iters; ++it) {
        for (int64_t a = 0; a < hc; ++a) {
          double s = 0;
          for (int64_t b = 0; b < hc; ++b) s += c[a * hc + b];
          for (int64_t b = 0; b < hc; ++b) c[a * hc + b] /= s + p_.hc_eps;
        }
        normalise_columns();
      }
      for (int64_t i = 0; i < hc * hc; ++i) (*C)[t * hc * hc + i] = static_cast<float>(c[i]);
    }
    float* out = y + t * dim;
    for (int64_t d = 0; d < dim; ++d) {
      double s = 0;
      for (int64_t k = 0; k < hc; ++k) s += pre[k] * u[k * dim + d];
      out[d] = static_cast<float>(s);
    }
  }
}

void HyperConnection::expand(const float* o, const float* X, int64_t tokens,
                             const std::vector<float>& post, const std::vector<float>& C,
                             float* X_out) const {
  const int64_t hc = p_.hc, dim = p_.dim;
  for (int64_t t = 0; t < tokens; ++t) {
    const float* x = X + t * hc * dim;
    const float* c = C.data() + t * hc * hc;
    for (int64_t b = 0; b < hc; ++b) {
      float* out = X_out + (t * hc + b) * dim;
      const float pb = post[t * hc + b];
      for (int64_t d = 0; d < dim; ++d) out[d] = pb * o[t * dim + d];
      for (int64_t a = 0; a < hc; ++a) {
        const float w = c[a * hc + b];
        const float* xa = x + a * dim;
        for (int64_t d = 0; d < dim; ++d) out[d] += w * xa[d];
      }
    }
  }
}

}  // namespace pagoda
