// A context-free grammar over bytes, in the form the matcher runs: rules of
// alternatives of sequences of elements, each element a literal byte
// string, a character class (Unicode code point ranges, matched as UTF-8),
// a token of the vocabulary (matched as that token id, not as bytes: how
// a grammar admits special tokens such as tool-call markers) or a
// reference to another rule, with a repetition count {min, max}.
// Groups and quantified sub-expressions of the text form (gbnf_parser.h)
// become anonymous rules. Rule 0 is the root.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace pagoda::structured {

constexpr int32_t kUnbounded = -1;  // Element::max with no upper bound
constexpr uint32_t kMaxCodePoint = 0x10FFFF;

struct Element {
  enum class Kind : uint8_t { Literal, Class, RuleRef, Token };
  Kind kind = Kind::Literal;
  std::string literal;                                // Literal: its bytes (non-empty); Token: its text
  int32_t token = -1;                                 // Token: its id (-1: look `literal` up in the vocabulary)
  std::vector<std::pair<uint32_t, uint32_t>> ranges;  // Class: sorted disjoint [lo, hi]
  int32_t rule = -1;                                  // RuleRef
  int32_t min = 1, max = 1;                           // repetitions; max kUnbounded = no bound

  bool class_contains(uint32_t cp) const;
  // Whether some code point in [lo, hi] is in the class.
  bool class_intersects(uint32_t lo, uint32_t hi) const;
};

struct Rule {
  std::string name;
  std::vector<std::vector<Element>> alternatives;
};

struct Grammar {
  std::vector<Rule> rules;  // rules[0] is the root

  // Checks what the matcher needs and throws InputError otherwise: every
  // reference defined, no left recursion (a rule reaching itself before
  // consuming a byte) and no unbounded repetition of something that can
  // match the empty string (either would loop forever).
  void validate() const;
  // The grammar in the text form (for errors and debugging).
  std::string to_string() const;
  // This grammar preceded by a fixed text (a new root: the literal, then
  // the old root).
  Grammar prefixed(const std::string& literal) const;
};

}  // namespace pagoda::structured
