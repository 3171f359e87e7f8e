// KVStorage: the pool's memory is reserved, not touched, until used or
// prefaulted; its arrays start on a huge-page boundary and do not overlap.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>

#include "kv/kv_storage.h"

namespace pagoda {
namespace {

int64_t resident_bytes() {
  long total = 0, resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return -1;
  const int got = std::fscanf(f, "%ld %ld", &total, &resident);
  std::fclose(f);
  return got == 2 ? int64_t{resident} * sysconf(_SC_PAGESIZE) : -1;
}

TEST(KVStorage, ArraysAreDisjointAndStartOnAHugePage) {
  const int64_t slots = 6, blocks = 10, page = 16 * 2 * 8 * 2;  // bs 16, 2 heads, dim 8, bf16
  KVStorage s(slots, blocks, page);
  const size_t slot_bytes = static_cast<size_t>(blocks * page);
  EXPECT_EQ(s.bytes(), slots * slot_bytes);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(s.slot(0)) % (uintptr_t{2} << 20), 0u);
  for (int64_t i = 1; i < slots; ++i) {
    EXPECT_EQ(static_cast<uint8_t*>(s.slot(i)) - static_cast<uint8_t*>(s.slot(i - 1)),
              static_cast<ptrdiff_t>(slot_bytes));
  }
  // Every byte is writable.
  std::memset(s.slot(0), 0x5a, s.bytes());
}

TEST(KVStorage, PrefaultMakesThePoolResident) {
  constexpr int64_t kMiB = int64_t{1} << 20;
  // 2 layers x (K, V) x 16 MiB.
  KVStorage s(4, 16, kMiB);
  ASSERT_EQ(s.bytes(), static_cast<size_t>(64 * kMiB));
  const int64_t before = resident_bytes();
  ASSERT_GT(before, 0);
  s.prefault();
  const int64_t after = resident_bytes();
  EXPECT_GE(after - before, 60 * kMiB) << "before " << before << " after " << after;
  const auto* bytes = static_cast<const uint8_t*>(s.slot(0));
  for (size_t i = 0; i < s.bytes(); i += 4096) ASSERT_EQ(bytes[i], 0) << i;
}

}  // namespace
}  // namespace pagoda
