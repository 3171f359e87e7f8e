// Typed views of checkpoint tensors for the kernels. F32 and BF16 tensors
// are used in place from the file mapping; anything the kernels cannot read
// directly (F16, misaligned data, vectors wanted as f32) is converted once,
// at load, into buffers this store owns.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "models/checkpoint.h"
#include "ops/ops.h"

namespace pagoda {

class WeightStore {
 public:
  explicit WeightStore(const Checkpoint& checkpoint) : checkpoint_(checkpoint) {}

  // A [rows, cols] matrix; checks the tensor's shape.
  ops::Matrix matrix(const std::string& name, int64_t rows, int64_t cols);
  // A 1-D tensor of n values as f32.
  const float* vector(const std::string& name, int64_t n);

  const Checkpoint& checkpoint() const { return checkpoint_; }

 private:
  void* own(size_t bytes);

  const Checkpoint& checkpoint_;
  std::deque<std::vector<uint8_t>> owned_;  // deque: buffers never move
};

}  // namespace pagoda
