// What the kernel says about memory: MemAvailable, for budgets that must
// leave the rest of the machine alone (the KV pool's default size, the
// benchmarks' probe buffers); and memory on huge pages for buffers that are
// streamed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

namespace pagoda {

// MemAvailable from /proc/meminfo in bytes (0 if unknown).
int64_t available_memory_bytes();

// A transparent huge page on x86-64 (and AArch64 with 4 KiB pages).
constexpr size_t kHugePageBytes = size_t{2} << 20;

// Anonymous memory of `bytes` that starts on a huge-page boundary, with
// transparent huge pages asked for before it is first touched: a stream
// over 4 KiB pages takes a TLB miss, and the prefetchers a restart, every
// 4 KiB (decode streams every weight once a step; attention streams the KV
// pool's pages). Its own mapping: the advice over a heap buffer would split
// the heap's mapping around it. Pages cost nothing until touched; where the
// kernel has no huge pages the buffer works the same. data() is null when
// the mapping fails (or bytes is 0).
class HugePageBuffer {
 public:
  HugePageBuffer() = default;
  explicit HugePageBuffer(size_t bytes);
  ~HugePageBuffer();
  HugePageBuffer(HugePageBuffer&& other) noexcept { *this = std::move(other); }
  HugePageBuffer& operator=(HugePageBuffer&& other) noexcept;

  uint8_t* data() const { return data_; }
  size_t size() const { return bytes_; }

 private:
  uint8_t* data_ = nullptr;  // the mapping's start, on a huge-page boundary
  size_t bytes_ = 0;
  size_t mapping_bytes_ = 0;  // bytes_ rounded up to whole pages
};

}  // namespace pagoda
