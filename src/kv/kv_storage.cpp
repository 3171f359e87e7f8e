#include "kv/kv_storage.h"

#include <sys/mman.h>

#include "core/error.h"

namespace pagoda {

KVStorage::KVStorage(int64_t num_layers, int64_t num_blocks, int64_t elems_per_block, DType dtype)
    : layer_bytes_(num_blocks * elems_per_block * static_cast<int64_t>(dtype_size(dtype))),
      dtype_(dtype) {
  PAGODA_CHECK(dtype == DType::F32 || dtype == DType::BF16, "KV cache dtype {}", dtype_name(dtype));
  bytes_ = static_cast<size_t>(2 * num_layers * layer_bytes_);
  if (bytes_ == 0) return;
  void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    throw_input_error("cannot reserve {} bytes for the KV cache (lower --kv-cache-memory)", bytes_);
  }
  base_ = static_cast<uint8_t*>(p);
}

KVStorage::~KVStorage() {
  if (base_) munmap(base_, bytes_);
}

}  // namespace pagoda
