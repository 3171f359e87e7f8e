// The two halves of rotary embedding, shared by ops::rope and the fused
// attention-input op so both rotate bit for bit alike.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace pagoda::ops::cpu {

// A thread's cos/sin buffers for `half` pairs: on the stack up to 256,
// else a thread_local buffer grown once (no steady-state allocation).
class RopeScratch {
 public:
  explicit RopeScratch(int half) : half_(half) {
    if (half > kStackPairs) {
      thread_local std::vector<float> big;
      if (static_cast<int>(big.size()) < 2 * half) big.resize(2 * half);
      data_ = big.data();
    }
  }
  RopeScratch(const RopeScratch&) = delete;
  RopeScratch& operator=(const RopeScratch&) = delete;
  float* cos_v() { return data_; }
  float* sin_v() { return data_ + half_; }

 private:
  static constexpr int kStackPairs = 256;
  float stack_[2 * kStackPairs];
  int half_;
  float* data_ = stack_;
};

// cos/sin of position * inv_freq[i] for i < half; angles in f32 as Hugging
// Face forms them. Once per token, shared by every head.
inline void rope_angles(int32_t position, const float* inv_freq, int half, float* cos_v,
                        float* sin_v) {
  for (int i = 0; i < half; ++i) {
    const float angle = static_cast<float>(position) * inv_freq[i];
    cos_v[i] = std::cos(angle);
    sin_v[i] = std::sin(angle);
  }
}

// Rotates one head in place: element i pairs with i + half ("rotate_half").
inline void rope_head(float* v, const float* cos_v, const float* sin_v, int half) {
  float* lo = v;
  float* hi = v + half;
  for (int i = 0; i < half; ++i) {
    const float a = lo[i], b = hi[i];
    lo[i] = a * cos_v[i] - b * sin_v[i];
    hi[i] = b * cos_v[i] + a * sin_v[i];
  }
}

}  // namespace pagoda::ops::cpu
