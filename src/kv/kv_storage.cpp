#include "kv/kv_storage.h"

#include <sys/mman.h>

#include <cstring>

#include "core/error.h"

namespace pagoda {

KVStorage::KVStorage(int64_t num_layers, int64_t num_blocks, int64_t floats_per_block,
                     bool prefault)
    : layer_floats_(num_blocks * floats_per_block) {
  bytes_ = static_cast<size_t>(2 * num_layers * layer_floats_) * sizeof(float);
  if (bytes_ == 0) return;
  void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    throw_input_error("cannot reserve {} bytes for the KV cache (lower --kv-cache-memory)", bytes_);
  }
  base_ = static_cast<float*>(p);
  // Huge pages where the kernel offers them on request: a prefill writes
  // MBs of fresh K/V per layer, and 4 KiB first-touch faults cost ~5% of it.
  // Advice only: without transparent huge pages this changes nothing.
  madvise(p, bytes_, MADV_HUGEPAGE);
  if (prefault) std::memset(p, 0, bytes_);
}

KVStorage::~KVStorage() {
  if (base_) munmap(base_, bytes_);
}

}  // namespace pagoda
