#include "kv/kv_cache_plan.h"

#include <algorithm>
#include <climits>

#include "core/error.h"

namespace pagoda {

namespace {

// Caches of one spec (a kind) before they are split into groups.
struct Kind {
  KVCacheSpec spec;
  int32_t block_size = 0;
  int64_t page_bytes = 0;  // the spec's own page, before bucket padding
  std::vector<KVTensorRef> tensors;
  int32_t pool = 0;
};

// The bucket page each distinct page size goes to (kv_cache_plan.h): largest
// first, a size joins the last bucket started when that bucket's page is at
// most 1.25x its own.
int64_t bucket_of(const std::vector<int64_t>& heads_desc, int64_t page) {
  for (auto it = heads_desc.rbegin(); it != heads_desc.rend(); ++it) {
    if (*it >= page) return *it;
  }
  PAGODA_CHECK(false, "page of {} B has no bucket", page);
  return 0;
}

// Pages one tensor of a kind holds for a long sequence (2^20 positions):
// what its empty slots cost. Full-attention kinds grow with the sequence,
// sliding ones stay at their window's pages, so the full ones dominate.
int64_t long_sequence_pages(const Kind& k) {
  constexpr int64_t kLong = int64_t{1} << 20;
  const int64_t all = kLong / k.block_size;
  const int64_t w = k.spec.sliding_window;
  return w == 0 ? all : std::min(all, w / k.block_size + 2);
}

// The tensor count g that the kinds of one pool are split into. The
// candidates are the kinds' own counts (vLLM picks between the smallest and
// the largest); each kind becomes ceil(n / g) groups of g slots, and the
// candidate leaving the fewest empty slots, weighted by the pages each kind
// holds for a long sequence, wins (the larger on ties). If even that leaves
// over 5% of the weighted slots empty, g = 1 (no slot is ever empty).
int32_t group_size_for(const std::vector<const Kind*>& kinds) {
  int64_t best = 1;
  double best_waste = 0;
  bool found = false;
  for (const Kind* candidate : kinds) {
    const auto g = static_cast<int64_t>(candidate->tensors.size());
    double slots = 0, empty = 0;
    for (const Kind* k : kinds) {
      const auto n = static_cast<int64_t>(k->tensors.size());
      const double w = static_cast<double>(long_sequence_pages(*k));
      slots += static_cast<double>((n + g - 1) / g * g) * w;
      empty += static_cast<double>((n + g - 1) / g * g - n) * w;
    }
    const double waste = empty / slots;
    if (!found || waste < best_waste || (waste == best_waste && g > best)) {
      best = g;
      best_waste = waste;
      found = true;
    }
  }
  return best_waste <= 0.05 ? static_cast<int32_t>(best) : 1;
}

}  // namespace

KVCachePlan plan_kv_cache(const std::vector<LayerKVCache>& caches, int32_t block_size) {
  if (block_size < 1) throw_input_error("block size must be >= 1, got {}", block_size);
  if (caches.empty()) throw_input_error("the model declares no KV cache");
  KVCachePlan plan;
  plan.block_size = block_size;
  // Kinds: equal specs, in order of first appearance.
  std::vector<Kind> kinds;
  std::vector<std::pair<size_t, size_t>> where;  // per cache: kind, index in it
  for (const LayerKVCache& c : caches) {
    PAGODA_CHECK(c.layer >= 0 && c.spec.entry_bytes > 0 && c.spec.block_size >= 0,
                 "bad cache '{}' of layer {}", c.name, c.layer);
    if (static_cast<size_t>(c.layer) >= plan.layer_cache_group.size()) {
      plan.layer_cache_group.resize(c.layer + 1);
    }
    auto& layer_caches = plan.layer_cache_group[c.layer];
    const KVTensorRef ref{c.layer, static_cast<int32_t>(layer_caches.size())};
    layer_caches.push_back(-1);  // set once the kinds are split into groups
    auto it = std::find_if(kinds.begin(), kinds.end(),
                           [&](const Kind& k) { return k.spec == c.spec; });
    if (it == kinds.end()) {
      Kind k;
      k.spec = c.spec;
      k.block_size = c.spec.block_size > 0 ? c.spec.block_size : block_size;
      if (block_size % k.block_size != 0) {
        throw_input_error(
            "the block size {} is not a multiple of the {}-position pages of cache '{}' ({}): "
            "prefix caching hashes whole blocks, each of whole pages",
            block_size, k.block_size, c.name, c.spec.format);
      }
      k.page_bytes = k.spec.page_bytes(k.block_size);  // checks the ratio
      kinds.push_back(std::move(k));
      it = kinds.end() - 1;
    }
    it->tensors.push_back(ref);
    where.emplace_back(it - kinds.begin(), it->tensors.size() - 1);
  }

  // Buckets of page sizes, then pools in order of first appearance.
  std::vector<int64_t> sizes;
  for (const Kind& k : kinds) sizes.push_back(k.page_bytes);
  std::sort(sizes.begin(), sizes.end(), std::greater<>());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  std::vector<int64_t> heads;  // descending
  for (int64_t s : sizes) {
    if (heads.empty() || heads.back() * 4 > s * 5) heads.push_back(s);
  }
  for (Kind& k : kinds) {
    const int64_t page = bucket_of(heads, k.page_bytes);
    auto pool = std::find_if(plan.pools.begin(), plan.pools.end(),
                             [&](const KVPoolPlan& p) { return p.page_bytes == page; });
    if (pool == plan.pools.end()) {
      plan.pools.push_back({page, 0});
      pool = plan.pools.end() - 1;
    }
    k.pool = static_cast<int32_t>(pool - plan.pools.begin());
  }

  // One tensor count per pool; each kind becomes ceil(n / g) groups.
  std::vector<std::vector<const Kind*>> of_pool(plan.pools.size());
  for (const Kind& k : kinds) of_pool[k.pool].push_back(&k);
  for (size_t p = 0; p < plan.pools.size(); ++p) {
    plan.pools[p].num_slots = group_size_for(of_pool[p]);
  }
  std::vector<int32_t> first_group(kinds.size());
  for (size_t k = 0; k < kinds.size(); ++k) {
    const int32_t g = plan.pools[kinds[k].pool].num_slots;
    first_group[k] = static_cast<int32_t>(plan.groups.size());
    for (size_t i = 0; i < kinds[k].tensors.size(); i += g) {
      KVCacheGroup group;
      group.spec = kinds[k].spec;
      group.block_size = kinds[k].block_size;
      group.pool = kinds[k].pool;
      const size_t end = std::min(kinds[k].tensors.size(), i + g);
      group.tensors.assign(kinds[k].tensors.begin() + i, kinds[k].tensors.begin() + end);
      plan.groups.push_back(std::move(group));
    }
  }
  for (size_t c = 0; c < caches.size(); ++c) {
    const auto [k, i] = where[c];
    const KVTensorRef& ref = kinds[k].tensors[i];
    const int32_t g = plan.pools[kinds[k].pool].num_slots;
    plan.layer_cache_group[ref.layer][ref.cache] =
        first_group[k] + static_cast<int32_t>(i / static_cast<size_t>(g));
  }
  return plan;
}

int64_t KVCachePlan::bytes_per_block() const {
  int64_t total = 0;
  for (const KVPoolPlan& p : pools) total += p.num_slots * p.page_bytes;
  return total;
}

int64_t KVCachePlan::group_blocks(size_t g, int64_t num_tokens) const {
  const int64_t b = groups[g].block_size;
  const int64_t all = (num_tokens + b - 1) / b;
  const int64_t w = groups[g].spec.sliding_window;
  return w == 0 ? all : std::min(all, w / b + 2);
}

std::vector<int64_t> KVCachePlan::blocks_per_sequence(int64_t num_tokens) const {
  std::vector<int64_t> need(pools.size(), 0);
  for (size_t g = 0; g < groups.size(); ++g) need[groups[g].pool] += group_blocks(g, num_tokens);
  return need;
}

int64_t KVCachePlan::bytes_per_sequence(int64_t num_tokens) const {
  int64_t total = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    total += group_blocks(g, num_tokens) * pools[groups[g].pool].page_bytes *
             static_cast<int64_t>(groups[g].tensors.size());
  }
  return total;
}

int64_t KVCachePlan::bytes_held_between_steps(int64_t num_tokens) const {
  int64_t total = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    const int64_t b = groups[g].block_size;
    const int64_t first = groups[g].spec.first_needed_position(num_tokens) / b;
    const int64_t pages = num_tokens == 0 ? 0 : (num_tokens - 1) / b - first + 1;
    total += pages * pools[groups[g].pool].page_bytes *
             static_cast<int64_t>(groups[g].tensors.size());
  }
  return total;
}

int64_t KVCachePlan::reserved_bytes_per_sequence(int64_t num_tokens) const {
  const std::vector<int64_t> need = blocks_per_sequence(num_tokens);
  int64_t total = 0;
  for (size_t p = 0; p < pools.size(); ++p) {
    total += need[p] * pools[p].num_slots * pools[p].page_bytes;
  }
  return total;
}

KVPoolSizes size_kv_pools(const KVCachePlan& plan, int64_t budget_bytes, int64_t max_model_len) {
  const std::vector<int64_t> need = plan.blocks_per_sequence(max_model_len);
  const int64_t per_sequence = plan.reserved_bytes_per_sequence(max_model_len);
  PAGODA_CHECK(per_sequence > 0 && budget_bytes >= per_sequence,
               "a budget of {} B for sequences of {} B", budget_bytes, per_sequence);
  KVPoolSizes sizes;
  sizes.token_capacity = INT64_MAX;
  for (size_t p = 0; p < plan.pools.size(); ++p) {
    const auto share = static_cast<__int128>(budget_bytes) * need[p] / per_sequence;
    sizes.num_blocks.push_back(static_cast<int64_t>(std::min<__int128>(share, INT32_MAX)));
    sizes.token_capacity = std::min<int64_t>(
        sizes.token_capacity,
        static_cast<int64_t>(static_cast<__int128>(sizes.num_blocks[p]) * max_model_len / need[p]));
  }
  return sizes;
}

}  // namespace pagoda
