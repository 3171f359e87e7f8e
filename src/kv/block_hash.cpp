#include "kv/block_hash.h"

#define XXH_INLINE_ALL  // header-only use of libxxhash-dev: nothing to link
#include <xxhash.h>

namespace pagoda {

BlockHash hash_block(const BlockHash& parent, std::span<const int32_t> tokens, uint64_t extra_key) {
  XXH3_state_t state;
  XXH3_128bits_reset(&state);
  XXH3_128bits_update(&state, &parent, sizeof parent);
  XXH3_128bits_update(&state, &extra_key, sizeof extra_key);
  XXH3_128bits_update(&state, tokens.data(), tokens.size_bytes());
  const XXH128_hash_t h = XXH3_128bits_digest(&state);
  return {h.low64, h.high64};
}

std::vector<BlockHash> hash_full_blocks(std::span<const int32_t> tokens, int32_t block_size,
                                        uint64_t extra_key) {
  std::vector<BlockHash> hashes;
  BlockHash parent;
  for (size_t start = 0; start + block_size <= tokens.size(); start += block_size) {
    parent = hash_block(parent, tokens.subspan(start, block_size), extra_key);
    hashes.push_back(parent);
  }
  return hashes;
}

}  // namespace pagoda
