#include "models/weights.h"

#include <cstring>

#include "core/error.h"

namespace pagoda {

namespace {

bool aligned_for(const void* p, DType dtype) {
  return reinterpret_cast<uintptr_t>(p) % dtype_size(dtype) == 0;
}

// Converts n values of a float dtype to f32.
void to_f32(const TensorInfo& t, float* out) {
  const int64_t n = t.numel();
  const auto* bytes = static_cast<const uint8_t*>(t.data);
  for (int64_t i = 0; i < n; ++i) {
    switch (t.dtype) {
      case DType::F32:
        std::memcpy(&out[i], bytes + 4 * i, 4);
        break;
      case DType::BF16: {
        bf16_t h;
        std::memcpy(&h, bytes + 2 * i, 2);
        out[i] = bf16_to_f32(h);
        break;
      }
      case DType::F16: {
        f16_t h;
        std::memcpy(&h, bytes + 2 * i, 2);
        out[i] = f16_to_f32(h);
        break;
      }
      default:
        throw InternalError("to_f32: not a float dtype");
    }
  }
}

}  // namespace

void* WeightStore::own(size_t bytes) {
  owned_.emplace_back(bytes);
  return owned_.back().data();
}

ops::Matrix WeightStore::matrix(const std::string& name, int64_t rows, int64_t cols) {
  const TensorInfo& t = checkpoint_.get(name, {rows, cols});
  if ((t.dtype == DType::F32 || t.dtype == DType::BF16) && aligned_for(t.data, t.dtype)) {
    return {t.data, t.dtype, rows, cols};
  }
  auto* f = static_cast<float*>(own(static_cast<size_t>(rows * cols) * sizeof(float)));
  to_f32(t, f);
  return {f, DType::F32, rows, cols};
}

const float* WeightStore::vector(const std::string& name, int64_t n) {
  const TensorInfo& t = checkpoint_.get(name, {n});
  if (t.dtype == DType::F32 && aligned_for(t.data, DType::F32)) {
    return static_cast<const float*>(t.data);
  }
  auto* f = static_cast<float*>(own(static_cast<size_t>(n) * sizeof(float)));
  to_f32(t, f);
  return f;
}

}  // namespace pagoda
