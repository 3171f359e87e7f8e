#include "kv/kv_storage.h"

#include <sys/mman.h>

#include "core/error.h"

namespace pagoda {

KVStorage::KVStorage(int64_t num_layers, int64_t num_blocks, int64_t floats_per_block)
    : layer_floats_(num_blocks * floats_per_block) {
  bytes_ = static_cast<size_t>(2 * num_layers * layer_floats_) * sizeof(float);
  if (bytes_ == 0) return;
  void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    throw_input_error("cannot reserve {} bytes for the KV cache (lower --kv-cache-memory)", bytes_);
  }
  base_ = static_cast<float*>(p);
}

KVStorage::~KVStorage() {
  if (base_) munmap(base_, bytes_);
}

}  // namespace pagoda
