// Content hashes of full KV blocks for automatic prefix caching. A block's
// hash covers its parent's hash and its own token ids, so equal tokens after
// a different prefix never match (XXH3-128 over the chain).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace pagoda {

struct BlockHash {
  uint64_t lo = 0, hi = 0;
  bool operator==(const BlockHash&) const = default;
};

struct BlockHashHasher {
  size_t operator()(const BlockHash& h) const {
    return static_cast<size_t>(h.lo ^ (h.hi * 0x9E3779B97F4A7C15ull));
  }
};

// hash(parent, tokens [, extra_key]); the first block's parent is the zero hash.
BlockHash hash_block(const BlockHash& parent, std::span<const int32_t> tokens,
                     uint64_t extra_key = 0);

// Hashes of every full block of `tokens`, chained from the start.
std::vector<BlockHash> hash_full_blocks(std::span<const int32_t> tokens, int32_t block_size,
                                        uint64_t extra_key = 0);

}  // namespace pagoda
