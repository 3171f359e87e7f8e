// The memory behind the paged KV cache: for every layer a K and a V array of
// [num_blocks, num_kv_heads, block_size, head_dim] elements of the cache's
// dtype (f32 or bf16; ops::KVLayout), reserved once at start.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace pagoda {

class KVStorage {
 public:
  // Maps num_layers * 2 arrays of elems_per_block * num_blocks elements of
  // dtype. The memory comes from an anonymous mapping, so pages a run never
  // touches cost nothing (in 2 MiB steps where huge pages are on).
  KVStorage(int64_t num_layers, int64_t num_blocks, int64_t elems_per_block, DType dtype);
  ~KVStorage();
  KVStorage(const KVStorage&) = delete;
  KVStorage& operator=(const KVStorage&) = delete;

  // Writes zeros over every page, in parallel (each kernel thread first
  // touches its share).
  void prefault();

  void* k(int64_t layer) const { return base_ + (2 * layer) * layer_bytes_; }
  void* v(int64_t layer) const { return base_ + (2 * layer + 1) * layer_bytes_; }
  DType dtype() const { return dtype_; }
  size_t bytes() const { return bytes_; }

 private:
  static constexpr size_t kHugePage = size_t{2} << 20;
  void* mapping_ = nullptr;  // bytes_ + kHugePage; base_ is its first huge-page boundary
  uint8_t* base_ = nullptr;
  size_t bytes_ = 0;
  int64_t layer_bytes_ = 0;
  DType dtype_;
};

}  // namespace pagoda
