#include "core/meminfo.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <utility>

namespace pagoda {

int64_t available_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

HugePageBuffer::HugePageBuffer(size_t bytes) {
  if (bytes == 0) return;
  // One huge page more than asked for, so the buffer can start on a
  // boundary.
  mapping_bytes_ = bytes + kHugePageBytes;
  void* p = mmap(nullptr, mapping_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    mapping_bytes_ = 0;
    return;
  }
  mapping_ = p;
  const auto addr = reinterpret_cast<uintptr_t>(p);
  data_ = static_cast<uint8_t*>(p) + (kHugePageBytes - addr % kHugePageBytes) % kHugePageBytes;
  bytes_ = bytes;
#ifdef MADV_HUGEPAGE
  madvise(data_, bytes_, MADV_HUGEPAGE);
#endif
}

HugePageBuffer::~HugePageBuffer() {
  if (mapping_) munmap(mapping_, mapping_bytes_);
}

HugePageBuffer& HugePageBuffer::operator=(HugePageBuffer&& other) noexcept {
  if (this != &other) {
    if (mapping_) munmap(mapping_, mapping_bytes_);
    mapping_ = std::exchange(other.mapping_, nullptr);
    mapping_bytes_ = std::exchange(other.mapping_bytes_, 0);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

}  // namespace pagoda
