// The memory behind the paged KV cache: for every layer a K and a V array of
// [num_blocks, num_kv_heads, block_size, head_dim] f32 (ops::KVLayout),
// reserved once at start.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace pagoda {

class KVStorage {
 public:
  // Maps num_layers * 2 arrays of block_elems * num_blocks floats. The memory
  // comes from an anonymous mapping, so pages a run never touches cost nothing.
  KVStorage(int64_t num_layers, int64_t num_blocks, int64_t floats_per_block);
  ~KVStorage();
  KVStorage(const KVStorage&) = delete;
  KVStorage& operator=(const KVStorage&) = delete;

  float* k(int64_t layer) const { return base_ + (2 * layer) * layer_floats_; }
  float* v(int64_t layer) const { return base_ + (2 * layer + 1) * layer_floats_; }
  size_t bytes() const { return bytes_; }

 private:
  float* base_ = nullptr;
  size_t bytes_ = 0;
  int64_t layer_floats_ = 0;
};

}  // namespace pagoda
