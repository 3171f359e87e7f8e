#include "kv/kv_storage.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/parallel.h"

namespace pagoda {

KVStorage::KVStorage(int64_t num_slots, int64_t num_blocks, int64_t page_bytes)
    : slot_bytes_(num_blocks * page_bytes) {
  PAGODA_CHECK(num_slots >= 0 && num_blocks >= 0 && page_bytes > 0, "KV storage {} x {} x {}",
               num_slots, num_blocks, page_bytes);
  const auto bytes = static_cast<size_t>(num_slots * slot_bytes_);
  if (bytes == 0) return;
  // Huge pages (HugePageBuffer): attention reads each kv head's blocks as
  // scattered 4 KiB runs, and with 4 KiB pages every run is a TLB miss and
  // a new page for the prefetchers (8k-context decode attention ~15%
  // faster, bench/attention_bench.cpp).
  memory_ = HugePageBuffer(bytes);
  if (!memory_.data()) {
    throw_input_error("cannot reserve {} bytes for the KV cache (lower --kv-cache-memory)", bytes);
  }
}

void KVStorage::prefault() {
  const size_t bytes = memory_.size();
  const auto pages = static_cast<int64_t>((bytes + kHugePageBytes - 1) / kHugePageBytes);
  parallel_for(pages, 1, [&](int64_t p0, int64_t p1) {
    const size_t first = static_cast<size_t>(p0) * kHugePageBytes;
    const size_t last = std::min(bytes, static_cast<size_t>(p1) * kHugePageBytes);
    std::memset(memory_.data() + first, 0, last - first);
  });
}

}  // namespace pagoda
