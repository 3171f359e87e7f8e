// What a model keeps in the KV cache, per layer, as typed specs (after vLLM
// v1's kv_cache_interface). A layer owns one or more named caches (K and V
// of a dense layer; one latent entry for MLA; later indexer keys,
// compressed entries, compressor state); each cache is described by a
// KVCacheSpec: which token positions it must keep (all of them, or a
// sliding window), how many positions make one entry (compress_ratio) and
// how many bytes one entry takes. Everything the cache manager, the pool
// planner and the slot math need is in the spec, so a new kind of cache is
// a new spec, not a branch in every caller; how an entry's bytes are laid
// out inside a page is the model's business (`format` names it).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace pagoda {

struct KVCacheSpec {
  // 0: every position of the sequence stays readable (full attention).
  // W > 0: a query at position t reads only positions (t - W, t]: blocks
  // wholly before that are released as the sequence grows.
  int64_t sliding_window = 0;
  // Token positions one entry stands for: 1 for K/V rows and MLA latents,
  // r for a cache of entries compressed r:1 (DeepSeek V4). A page stands
  // for the group's block size in positions whatever the ratio, so it holds
  // block_size / r entries and the slot math is the same for every ratio.
  int32_t compress_ratio = 1;
  // Bytes of one entry, including anything quantised formats keep per
  // entry (scales); per-page extras are expressed per entry too (a page of
  // n entries holds n values blocks then n scales: n * (values + scale)).
  int64_t entry_bytes = 0;
  // Token positions one page of this cache stands for; 0: the engine's
  // block size (--block-size). A cache whose pages cover fewer positions
  // (DeepSeek V4: 64-position window pages, 4-position compressor-state
  // pages beside 256-position compressed blocks) has its own block tables
  // at that granularity; the engine's block size, which prefix caching
  // hashes by, must be a multiple of it.
  int32_t block_size = 0;
  // A page's bytes are rounded up to a multiple of this (FlashMLA aligns
  // pages to 576 bytes); 1: no rounding.
  int64_t page_alignment = 1;
  // The entry layout as the model reads it, e.g. "kv_heads 8x64 bf16" or
  // "mla 512+64 bf16"; part of the spec's identity, and what kv-plan prints.
  std::string format;

  bool operator==(const KVCacheSpec&) const = default;

  // Entries one page of block_size positions holds; throws InputError
  // unless block_size is a multiple of compress_ratio.
  int64_t entries_per_block(int32_t block_size) const;
  // Bytes of one page: a block's entries, rounded up to page_alignment.
  int64_t page_bytes(int32_t block_size) const;
  // The first position a query at position `query` can still read.
  int64_t first_needed_position(int64_t query) const;
  // The entry slot that position `pos` writes, given the request's block
  // table for this cache's group and the group's block size (positions per
  // page, KVCacheGroup::block_size); -1 when the position completes no
  // entry (compressed caches write once per compress_ratio positions).
  int64_t slot_of_position(const std::vector<int32_t>& block_table, int64_t pos,
                           int32_t block_size) const;
  // One line for logs and kv-plan: format, window, ratio, entry bytes.
  std::string describe() const;
};

// One cache of one layer, as a model declares it. A layer's caches are
// numbered in the order the model declares them; KVCacheView hands their
// memory back in that order.
struct LayerKVCache {
  int32_t layer = 0;
  std::string name;  // "k", "v", "latent", ...: for plans and errors
  KVCacheSpec spec;
};

// Appends a speculative proposer's caches (a draft model's layers, an MTP
// layer; numbered from 0) after `caches`' layers: they join the target's
// plan as layers past its last one (engine/spec_decode/proposer.h).
inline void append_proposer_caches(std::vector<LayerKVCache>& caches,
                                   const std::vector<LayerKVCache>& proposer_caches) {
  int32_t first_layer = 0;
  for (const LayerKVCache& c : caches) first_layer = std::max(first_layer, c.layer + 1);
  for (LayerKVCache c : proposer_caches) {
    c.layer += first_layer;
    caches.push_back(std::move(c));
  }
}

}  // namespace pagoda
