#include "structured/grammar_matcher.h"

#include <algorithm>

#include "core/error.h"

namespace pagoda::structured {

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar, int max_rollback)
    : grammar_(std::move(grammar)), max_rollback_(max_rollback), state_(grammar_->initial_state()) {
  PAGODA_CHECK(max_rollback >= 0, "max_rollback {} < 0", max_rollback);
}

void GrammarMatcher::commit() {
  if (max_rollback_ > 0) {
    if (static_cast<int>(previous_.size()) == max_rollback_) previous_.pop_front();
    previous_.push_back(std::move(state_));
  }
  std::swap(state_, next_);
  ++num_steps_;
}

bool GrammarMatcher::accept_token(int32_t id) {
  if (terminated_) return false;
  const TokenVocab& vocab = grammar_->vocab();
  const auto& eos = vocab.eos_ids();
  if (std::find(eos.begin(), eos.end(), id) != eos.end()) {
    if (!is_complete()) return false;
    next_ = state_;  // a step, so rollback undoes it like any other
    commit();
    terminated_ = true;
    return true;
  }
  if (id < 0 || id >= vocab.size()) return false;
  if (!grammar_->has_token_terminals()) return vocab.bytes(id).empty() ? false : accept_bytes(vocab.bytes(id));
  // Both readings of the token: as a token terminal, and as its bytes.
  const bool by_token = grammar_->advance_token(state_, id, next_);
  if (!vocab.bytes(id).empty()) {
    thread_local MatcherState by_bytes;
    by_bytes = state_;
    if (grammar_->advance_bytes(by_bytes, vocab.bytes(id))) {
      grammar_->merge(by_bytes, next_);
    } else if (!by_token) {
      return false;
    }
  } else if (!by_token) {
    return false;
  }
  commit();
  return true;
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
  if (terminated_) return false;
  next_ = state_;
  if (!grammar_->advance_bytes(next_, bytes)) return false;
  commit();
  return true;
}

void GrammarMatcher::rollback(int n) {
  PAGODA_CHECK(n >= 0 && n <= num_rollback(), "rollback of {} steps, {} can be undone", n, num_rollback());
  if (n == 0) return;
  state_ = std::move(previous_[previous_.size() - static_cast<size_t>(n)]);
  previous_.resize(previous_.size() - static_cast<size_t>(n));
  num_steps_ -= n;
  // Only the last step can be EOS, and it was just undone.
  terminated_ = false;
}

std::shared_ptr<const TokenMask> GrammarMatcher::mask() const { return token_mask(*grammar_, state_); }

void GrammarMatcher::apply_mask(std::span<float> logits) const {
  apply_token_mask(*mask(), grammar_->vocab().size(), logits);
}

}  // namespace pagoda::structured
