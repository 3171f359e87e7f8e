// One request's position in its grammar: the state after each accepted
// token is kept, so rollback (speculative decoding) is popping states.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "structured/compiled_grammar.h"
#include "structured/token_mask.h"

namespace pagoda::structured {

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar);

  // Advances by one token; false (state unchanged) when the grammar does
  // not allow it. EOS is allowed exactly when is_complete(), and ends the
  // match (is_terminated()).
  bool accept_token(int32_t id);
  // Advances by raw bytes as one step (rollback(1) undoes it); false
  // (state unchanged) when they leave the grammar.
  bool accept_bytes(std::string_view bytes);
  // Undoes the last n accepted steps (n <= num_steps()).
  void rollback(int n);
  int num_steps() const { return static_cast<int>(history_.size()) - 1; }

  // The input so far is a whole sentence (EOS would be allowed).
  bool is_complete() const { return state().complete; }
  // Nothing but EOS can follow.
  bool must_end() const { return state().num_stacks() == 0; }
  bool is_terminated() const { return terminated_; }

  // The allowed tokens now (cached by state in the grammar).
  std::shared_ptr<const TokenMask> mask() const;
  // Sets every disallowed token's logit to -inf.
  void apply_mask(std::span<float> logits) const;

  const CompiledGrammar& grammar() const { return *grammar_; }

 private:
  const MatcherState& state() const { return history_.back(); }

  std::shared_ptr<const CompiledGrammar> grammar_;
  std::vector<MatcherState> history_;  // history_[0]: the start; one per accepted step
  bool terminated_ = false;
};

}  // namespace pagoda::structured
