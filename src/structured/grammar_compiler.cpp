#include "structured/grammar_compiler.h"

#include "structured/gbnf_parser.h"

namespace pagoda::structured {

GrammarCompiler::GrammarCompiler(std::shared_ptr<const TokenVocab> vocab, size_t capacity)
    : vocab_(std::move(vocab)), capacity_(capacity) {}

std::shared_ptr<const CompiledGrammar> GrammarCompiler::compile(const OutputSpec& spec) {
  const std::string key = std::string(spec.kind_name()) + '\0' + spec.prefix + '\0' + spec.value;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = index_.find(key);
    if (it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
  }
  // Compiled outside the lock: a slow schema does not hold up the others.
  auto compiled = std::make_shared<const CompiledGrammar>(parse_gbnf(spec.to_gbnf()).prefixed(spec.prefix),
                                                         vocab_, spec.value);
  std::lock_guard<std::mutex> lock(mu_);
  if (!index_.count(key)) {
    lru_.emplace_front(key, compiled);
    index_[key] = lru_.begin();
    if (lru_.size() > capacity_) {
      index_.erase(lru_.back().first);
      lru_.pop_back();
    }
  }
  return compiled;
}

}  // namespace pagoda::structured
