#include "structured/grammar_matcher.h"

#include <algorithm>

#include "core/error.h"

namespace pagoda::structured {

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar)
    : grammar_(std::move(grammar)) {
  history_.push_back(grammar_->initial_state());
}

bool GrammarMatcher::accept_token(int32_t id) {
  if (terminated_) return false;
  const TokenVocab& vocab = grammar_->vocab();
  const auto& eos = vocab.eos_ids();
  if (std::find(eos.begin(), eos.end(), id) != eos.end()) {
    if (!is_complete()) return false;
    history_.push_back(state());  // a step, so rollback undoes it like any other
    terminated_ = true;
    return true;
  }
  if (id < 0 || id >= vocab.size() || vocab.bytes(id).empty()) return false;
  return accept_bytes(vocab.bytes(id));
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
  if (terminated_) return false;
  MatcherState next = state();
  if (!grammar_->advance_bytes(next, bytes)) return false;
  history_.push_back(std::move(next));
  return true;
}

void GrammarMatcher::rollback(int n) {
  PAGODA_CHECK(n >= 0 && n <= num_steps(), "rollback of {} steps, {} taken", n, num_steps());
  history_.resize(history_.size() - static_cast<size_t>(n));
  // Only the last step can be EOS, and it was just undone if n > 0.
  if (n > 0) terminated_ = false;
}

std::shared_ptr<const TokenMask> GrammarMatcher::mask() const { return token_mask(*grammar_, state()); }

void GrammarMatcher::apply_mask(std::span<float> logits) const {
  apply_token_mask(*mask(), grammar_->vocab().size(), logits);
}

}  // namespace pagoda::structured
