#include "structured/token_mask.h"

#include <limits>

namespace pagoda::structured {

namespace {

void allow(TokenMask& m, int32_t id) { m[id >> 6] |= uint64_t{1} << (id & 63); }

// Whether some stack of `s` stands in a repeating class that takes every
// token below `node` whole (see token_mask.h).
bool takes_subtree(const CompiledGrammar& g, const MatcherState& s, int32_t node) {
  const TokenVocab::Node& n = g.vocab().nodes()[node];
  const int32_t longest = n.max_len - n.depth;  // bytes: at least as many as characters
  for (uint32_t end : s.ends) {
    const Frame& f = s.frames[end - 1];
    const auto& p = g.position(f.pos);
    if (p.class_id < 0 || (f.rem & 0xF) != 0) continue;
    if (p.max != kUnbounded && p.max - f.count < longest) continue;
    if (g.subtree_in_class(p.class_id)[node]) return true;
  }
  return false;
}

struct TrieWalk {
  const CompiledGrammar& g;
  const TokenVocab& vocab;
  TokenMask& mask;
  std::vector<MatcherState>& levels;  // levels[d]: the state after the node at depth d

  void allow_range(int32_t begin, int32_t end) {
    const auto& ids = vocab.sorted_ids();
    for (int32_t k = begin; k < end; ++k) allow(mask, ids[k]);
  }

  void visit(int32_t node) {
    const auto& nodes = vocab.nodes();
    const int32_t depth = nodes[node].depth;
    const MatcherState& here = levels[depth];
    for (int32_t c = node + 1; c < nodes[node].end; c = nodes[c].end) {
      MatcherState& next = levels[depth + 1];
      if (!g.advance(here, nodes[c].byte, next)) continue;
      allow_range(nodes[c].token_begin, nodes[c].own_end);
      if (next.num_stacks() == 0) continue;
      if (takes_subtree(g, next, c)) {
        allow_range(nodes[c].own_end, nodes[c].token_end);
        continue;
      }
      visit(c);
      // levels[depth] is unchanged by the deeper levels' work.
    }
  }
};

}  // namespace

TokenMask compute_token_mask(const CompiledGrammar& grammar, const MatcherState& state) {
  const TokenVocab& vocab = grammar.vocab();
  TokenMask mask((static_cast<size_t>(vocab.size()) + 63) / 64, 0);
  if (state.complete) {
    for (int32_t id : vocab.eos_ids())
      if (id >= 0 && id < vocab.size()) allow(mask, id);
  }
  if (state.num_stacks() == 0) return mask;
  // Token terminals: the stacks standing on one allow its id (whatever
  // its bytes; a special token has none, so the trie walk never sees it).
  if (grammar.has_token_terminals()) {
    for (uint32_t end : state.ends) {
      const auto& p = grammar.position(state.frames[end - 1].pos);
      if (p.kind == Element::Kind::Token) allow(mask, grammar.element_at(state.frames[end - 1].pos).token);
    }
  }
  thread_local std::vector<MatcherState> levels;
  // Sized once: a deeper level never reallocates the shallower ones in use.
  const auto depth = static_cast<size_t>(vocab.nodes()[0].max_len) + 2;
  if (levels.size() < depth) levels.resize(depth);
  levels[0] = state;
  TrieWalk walk{grammar, vocab, mask, levels};
  walk.visit(0);
  return mask;
}

std::shared_ptr<const TokenMask> token_mask(const CompiledGrammar& grammar, const MatcherState& state) {
  const std::string key = state.key();
  if (auto hit = grammar.mask_cache().find(key)) return hit;
  auto mask = std::make_shared<const TokenMask>(compute_token_mask(grammar, state));
  grammar.mask_cache().insert(key, mask);
  return mask;
}

void apply_token_mask(const TokenMask& mask, int32_t vocab_size, std::span<float> logits) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const size_t n = std::min(logits.size(), static_cast<size_t>(vocab_size));
  for (size_t w = 0; w * 64 < n; ++w) {
    const uint64_t bits = mask[w];
    if (bits == ~uint64_t{0}) continue;
    const size_t end = std::min(n, w * 64 + 64);
    for (size_t i = w * 64; i < end; ++i) {
      if (!((bits >> (i & 63)) & 1)) logits[i] = kNegInf;
    }
  }
  for (size_t i = n; i < logits.size(); ++i) logits[i] = kNegInf;
}

std::shared_ptr<const TokenMask> MaskCache::find(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = index_.find(key);
  if (it == index_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->second;
}

void MaskCache::insert(const std::string& key, std::shared_ptr<const TokenMask> mask) {
  std::lock_guard<std::mutex> lock(mu_);
  if (index_.count(key)) return;
  lru_.emplace_front(key, std::move(mask));
  index_[key] = lru_.begin();
  if (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
}

}  // namespace pagoda::structured
