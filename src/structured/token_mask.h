// The tokens a matcher state allows, as a bitmask over the vocabulary.
//
// Built by walking the vocabulary's byte trie from the state: a subtree is
// entered only while some stack survives its prefix, so a state that
// expects a few bytes touches a few nodes. A state inside a repeating
// character class (JSON string contents, digits) takes whole subtrees at
// once when every token below is characters of the class and the
// repetition has room for the longest of them (no byte-by-byte walk of the
// ~150k tokens a string can continue with). Masks are cached per grammar by
// state, so the states a generation keeps returning to (inside a string,
// between fields) cost a lookup. EOS is allowed exactly when the state is
// complete; a token terminal (<[id]>) allows its id, special or not.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "structured/compiled_grammar.h"

namespace pagoda::structured {

using TokenMask = std::vector<uint64_t>;  // bit id set: the token is allowed

inline bool mask_allows(const TokenMask& m, int32_t id) { return (m[id >> 6] >> (id & 63)) & 1; }

// The mask for `state`, from the grammar's cache or computed (and cached).
// Thread-safe.
std::shared_ptr<const TokenMask> token_mask(const CompiledGrammar& grammar, const MatcherState& state);
// Computed without the cache (the benchmark's cold cost).
TokenMask compute_token_mask(const CompiledGrammar& grammar, const MatcherState& state);
// Sets the logits of disallowed tokens to -inf (logits.size() may exceed
// the mask's vocabulary: the extra ids are disallowed).
void apply_token_mask(const TokenMask& mask, int32_t vocab_size, std::span<float> logits);

// A small LRU of masks by state key.
class MaskCache {
 public:
  explicit MaskCache(size_t capacity = 128) : capacity_(capacity) {}
  std::shared_ptr<const TokenMask> find(const std::string& key);
  void insert(const std::string& key, std::shared_ptr<const TokenMask> mask);

 private:
  using Entry = std::pair<std::string, std::shared_ptr<const TokenMask>>;
  std::mutex mu_;
  size_t capacity_;
  std::list<Entry> lru_;  // most recent first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
};

}  // namespace pagoda::structured
