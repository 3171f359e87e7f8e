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
  // Map a huge page more than asked for, then give back what lies before
  // the first huge-page boundary and after the buffer's last page: one
  // mapping, advised whole, so the advice splits nothing (a model with
  // thousands of expert matrices would otherwise spend three mappings
  // each against vm.max_map_count).
  static const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const size_t reserved = bytes + kHugePageBytes;
  void* p = mmap(nullptr, reserved, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return;
  const auto addr = reinterpret_cast<uintptr_t>(p);
  const uintptr_t first = (addr + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  const uintptr_t last = (first + bytes + page - 1) / page * page;
  if (first > addr) munmap(p, first - addr);
  if (addr + reserved > last) munmap(reinterpret_cast<void*>(last), addr + reserved - last);
  data_ = reinterpret_cast<uint8_t*>(first);
  bytes_ = bytes;
  mapping_bytes_ = last - first;
#ifdef MADV_HUGEPAGE
  madvise(data_, mapping_bytes_, MADV_HUGEPAGE);
#endif
}

HugePageBuffer::~HugePageBuffer() {
  if (data_) munmap(data_, mapping_bytes_);
}

HugePageBuffer& HugePageBuffer::operator=(HugePageBuffer&& other) noexcept {
  if (this != &other) {
    if (data_) munmap(data_, mapping_bytes_);
    mapping_bytes_ = std::exchange(other.mapping_bytes_, 0);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

}  // namespace pagoda
