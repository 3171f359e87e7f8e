#include "kv/kv_cache_spec.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"

namespace pagoda {

int64_t KVCacheSpec::entries_per_block(int32_t block_size) const {
  if (compress_ratio < 1 || block_size % compress_ratio != 0) {
    throw_input_error("block size {} is not a multiple of the compress ratio {} of cache '{}'",
                      block_size, compress_ratio, format);
  }
  return block_size / compress_ratio;
}

int64_t KVCacheSpec::page_bytes(int32_t block_size) const {
  const int64_t raw = entries_per_block(block_size) * entry_bytes;
  const int64_t align = std::max<int64_t>(1, page_alignment);
  return (raw + align - 1) / align * align;
}

int64_t KVCacheSpec::first_needed_position(int64_t query) const {
  return sliding_window > 0 ? std::max<int64_t>(0, query - sliding_window + 1) : 0;
}

int64_t KVCacheSpec::slot_of_position(const std::vector<int32_t>& block_table, int64_t pos,
                                      int32_t block_size) const {
  // An entry of ratio r covers positions [i*r, (i+1)*r) and is written by
  // the last of them, once the whole group of r positions is known.
  if ((pos + 1) % compress_ratio != 0) return -1;
  const int64_t block = block_table[pos / block_size];
  return block * (block_size / compress_ratio) + (pos % block_size) / compress_ratio;
}

std::string KVCacheSpec::describe() const {
  std::string reach = sliding_window > 0 ? fmt::format("window {}", sliding_window) : "full";
  if (compress_ratio > 1) reach += fmt::format(", 1 entry per {} positions", compress_ratio);
  return fmt::format("{} ({}, {} B/entry)", format, reach, entry_bytes);
}

}  // namespace pagoda
