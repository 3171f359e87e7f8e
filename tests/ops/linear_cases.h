// The reference check linear's tests share: a table of shapes run against
// ref::linear on every combination, with a tolerance that follows f32
// accumulation error rather than the size of the result.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "ops/ops.h"
#include "ops/reference.h"
#include "ops_test_util.h"

namespace pagoda::ops::testing {

// The same weights as f32 or as their bf16 packing.
inline Matrix make_matrix(DType dt, const std::vector<float>& wf, const std::vector<uint16_t>& wb,
                          int64_t n, int64_t k) {
  return Matrix{dt == DType::BF16 ? static_cast<const void*>(wb.data()) : wf.data(), dt, n, k};
}

// Every combination of these is one case, with and without a bias.
struct LinearCases {
  std::vector<int64_t> k, m, n;
  std::vector<DType> dtypes;
  size_t count() const { return k.size() * m.size() * n.size() * dtypes.size() * 2; }
};

// Runs linear on each case (random data from rng) with isa selected, against
// ref::linear on the activations as that ISA sees them (bf16-rounded on the
// bf16 dot-product path). The kernel may differ from the f64 reference by
// f32 accumulation error only, which scales with sum |x * w|, not with |y|.
// Returns the number of cases checked.
inline size_t expect_linear_matches_reference(Isa isa, const LinearCases& cases,
                                              std::mt19937& rng) {
  size_t checked = 0;
  for (int64_t k : cases.k) {
    for (int64_t m : cases.m) {
      for (int64_t n : cases.n) {
        for (DType dt : cases.dtypes) {
          const auto x_in = random_vec(m * k, rng);
          const auto wf = random_vec(n * k, rng);
          const auto wb = to_bf16(wf);
          const auto bias = random_vec(n, rng);
          const Matrix w = make_matrix(dt, wf, wb, n, k);
          const auto x =
              dt == DType::BF16 && rounds_bf16_activations(isa) ? bf16_rounded(x_in) : x_in;
          for (const float* b : {static_cast<const float*>(nullptr), bias.data()}) {
            std::vector<float> y(m * n, NAN), y_ref(m * n);
            linear(x_in.data(), m, w, b, y.data());
            ref::linear(x.data(), m, w, b, y_ref.data());
            int bad = 0;
            for (int64_t i = 0; i < m; ++i) {
              for (int64_t j = 0; j < n; ++j) {
                double mag = b ? std::fabs(b[j]) : 0.0;
                for (int64_t t = 0; t < k; ++t) {
                  mag += std::fabs(double{x[i * k + t]} * ref::matrix_at(w, j, t));
                }
                const double err = std::fabs(double{y[i * n + j]} - y_ref[i * n + j]);
                if (!(err <= 1e-5 * mag + 1e-30)) ++bad;
              }
            }
            EXPECT_EQ(bad, 0) << "k=" << k << " m=" << m << " n=" << n
                              << " dtype=" << dtype_name(dt) << " bias=" << (b != nullptr);
            ++checked;
          }
        }
      }
    }
  }
  return checked;
}

}  // namespace pagoda::ops::testing
