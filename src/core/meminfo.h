// What the kernel says about memory: MemAvailable, for budgets that must
// leave the rest of the machine alone (the KV pool's default size, the
// benchmarks' probe buffers).
#pragma once

#include <cstdint>

namespace pagoda {

// MemAvailable from /proc/meminfo in bytes (0 if unknown).
int64_t available_memory_bytes();

}  // namespace pagoda
