// One request's position in its grammar. Rollback (speculative decoding
// undoing rejected draft tokens) needs the states before the last few
// steps; a matcher keeps exactly as many as it was built to roll back
// (none by default: an ordinary constrained request never rolls back, and
// its memory then does not grow with the output).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string_view>

#include "structured/compiled_grammar.h"
#include "structured/token_mask.h"

namespace pagoda::structured {

class GrammarMatcher {
 public:
  // `max_rollback`: the most steps rollback() may undo at once.
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar, int max_rollback = 0);

  // Advances by one token; false (state unchanged) when the grammar does
  // not allow it. EOS is allowed exactly when is_complete(), and ends the
  // match (is_terminated()). A token the grammar names as a token terminal
  // (<[id]>, special tokens included) advances those stacks; a token with
  // bytes advances by them too.
  bool accept_token(int32_t id);
  // Advances by raw bytes as one step (rollback(1) undoes it); false
  // (state unchanged) when they leave the grammar.
  bool accept_bytes(std::string_view bytes);
  // Undoes the last n accepted steps (n <= num_rollback()).
  void rollback(int n);
  // Steps accepted so far, and how many of the last ones can be undone.
  int64_t num_steps() const { return num_steps_; }
  int num_rollback() const { return static_cast<int>(previous_.size()); }

  // The input so far is a whole sentence (EOS would be allowed).
  bool is_complete() const { return state_.complete; }
  // Nothing but EOS can follow.
  bool must_end() const { return state_.num_stacks() == 0; }
  bool is_terminated() const { return terminated_; }

  // The allowed tokens now (cached by state in the grammar).
  std::shared_ptr<const TokenMask> mask() const;
  // Sets every disallowed token's logit to -inf.
  void apply_mask(std::span<float> logits) const;

  const CompiledGrammar& grammar() const { return *grammar_; }
  const MatcherState& state() const { return state_; }

 private:
  // Makes next_ the current state, keeping the old one if rollback needs it.
  void commit();

  std::shared_ptr<const CompiledGrammar> grammar_;
  int max_rollback_;
  MatcherState state_;
  MatcherState next_;                  // scratch for the step being tried (its buffers reused)
  std::deque<MatcherState> previous_;  // the states before the last num_rollback() steps, oldest first
  int64_t num_steps_ = 0;
  bool terminated_ = false;
};

}  // namespace pagoda::structured
