// What the kernel says about memory: MemAvailable, for budgets that must
// leave the rest of the machine alone (the KV pool's default size, the
// benchmarks' probe buffers); and the advice given it for buffers that are
// streamed.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pagoda {

// MemAvailable from /proc/meminfo in bytes (0 if unknown).
int64_t available_memory_bytes();

// A transparent huge page on x86-64 (and AArch64 with 4 KiB pages).
constexpr size_t kHugePageBytes = size_t{2} << 20;

// Asks for transparent huge pages over the whole pages of [data, data +
// bytes), before they are first touched: a stream over 4 KiB pages takes
// a TLB miss, and the prefetchers a restart, every 4 KiB (decode streams
// every weight once a step). Advice only: without huge pages nothing
// changes.
void advise_huge_pages(void* data, size_t bytes);

}  // namespace pagoda
