// A grammar flattened into positions and run as a byte-level pushdown
// automaton. A matcher state is a set of stacks; each stack's frames are
// the rules being matched, innermost last, and its top frame stands on a
// terminal (literal or character class) ready for the next byte, or on a
// token terminal ready for that token id (advance_token). Advancing
// by a byte moves every stack whose terminal accepts it and expands the
// result (repetitions, rule entries and returns) back to terminals;
// nondeterminism (alternatives) is kept as several stacks, so no
// backtracking is ever needed. Also holds what the token masks are built
// from: the vocabulary and, per character class that repeats, which trie
// subtrees it consumes entirely (token_mask.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "structured/grammar.h"
#include "structured/token_vocab.h"

namespace pagoda::structured {

class MaskCache;

struct Frame {
  int32_t pos = 0;    // position (CompiledGrammar::Position index)
  int32_t count = 0;  // repetitions of the element completed (saturated at min when unbounded)
  int32_t sub = 0;    // literal: bytes of the current repetition matched; class: partial code point
  int32_t rem = 0;    // class: (sequence length << 4) | continuation bytes still expected
  bool operator==(const Frame&) const = default;
};

// A set of stacks, flattened: stack i is frames[ends[i-1], ends[i]).
struct MatcherState {
  std::vector<Frame> frames;
  std::vector<uint32_t> ends;
  bool complete = false;  // the input so far is a whole sentence of the grammar

  size_t num_stacks() const { return ends.size(); }
  bool dead() const { return ends.empty() && !complete; }
  void clear() {
    frames.clear();
    ends.clear();
    complete = false;
  }
  // A canonical byte string (cache key).
  std::string key() const;
};

class CompiledGrammar {
 public:
  struct Position {
    Element::Kind kind = Element::Kind::Literal;
    bool end = false;  // the end of an alternative (return to the caller)
    int32_t min = 1, max = 1;
    int32_t element = -1;   // index into elements_ (not for ends)
    int32_t class_id = -1;  // repeating character classes: index of its subtree bits
  };

  CompiledGrammar(Grammar grammar, std::shared_ptr<const TokenVocab> vocab, std::string source);
  ~CompiledGrammar();

  const Grammar& grammar() const { return grammar_; }
  const TokenVocab& vocab() const { return *vocab_; }
  const std::string& source() const { return source_; }  // the spec it was compiled from
  const Position& position(int32_t p) const { return positions_[p]; }
  const Element& element_at(int32_t p) const { return *elements_[positions_[p].element]; }

  MatcherState initial_state() const { return initial_; }
  // The state after byte b (out is cleared first). Returns !out.dead().
  bool advance(const MatcherState& in, uint8_t b, MatcherState& out) const;
  bool advance_bytes(MatcherState& state, std::string_view bytes) const;
  // The state after token `id` read as a token terminal (out is cleared
  // first): the stacks standing on <id> move on, the others end.
  bool advance_token(const MatcherState& in, int32_t id, MatcherState& out) const;
  // Adds the stacks of `from` to `into` (a union of two readings).
  void merge(const MatcherState& from, MatcherState& into) const;
  // Whether any element is a token terminal (accept_token reads tokens
  // both ways only then).
  bool has_token_terminals() const { return has_token_terminals_; }

  // Per repeating character class, per trie node: every token below the
  // node (its bytes after the node) is whole characters of the class.
  const std::vector<bool>& subtree_in_class(int32_t class_id) const { return in_class_[class_id]; }
  MaskCache& mask_cache() const { return *mask_cache_; }

 private:
  void resolve_tokens();
  void flatten();
  void compute_class_subtrees();
  void decide(std::vector<Frame>& stack, MatcherState& out) const;
  void emit(const std::vector<Frame>& stack, MatcherState& out) const;
  int32_t bump(const Position& p, int32_t count) const;

  Grammar grammar_;
  std::shared_ptr<const TokenVocab> vocab_;
  std::string source_;
  std::vector<Position> positions_;
  std::vector<const Element*> elements_;
  std::vector<std::vector<int32_t>> rule_starts_;  // per rule, the first position of each alternative
  std::vector<std::vector<std::pair<uint32_t, uint32_t>>> class_ranges_;  // per class_id
  std::vector<std::vector<bool>> in_class_;
  MatcherState initial_;
  bool has_token_terminals_ = false;
  std::unique_ptr<MaskCache> mask_cache_;
};

}  // namespace pagoda::structured
