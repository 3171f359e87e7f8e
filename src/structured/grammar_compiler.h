// Compiles output specs against one vocabulary, keeping the most recent
// compiled grammars (and with them their mask caches) by spec, so a
// schema sent with every request is compiled once. Thread-safe.
#pragma once

#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "structured/compiled_grammar.h"
#include "structured/output_spec.h"
#include "structured/token_vocab.h"

namespace pagoda::structured {

class GrammarCompiler {
 public:
  // At most `capacity` grammars are kept, each with its mask cache (up to
  // 128 masks of vocab/8 bytes: 2.4 MB for Qwen3).
  explicit GrammarCompiler(std::shared_ptr<const TokenVocab> vocab, size_t capacity = 32);
  // Throws InputError naming the problem with the spec.
  std::shared_ptr<const CompiledGrammar> compile(const OutputSpec& spec);
  const TokenVocab& vocab() const { return *vocab_; }

 private:
  using Entry = std::pair<std::string, std::shared_ptr<const CompiledGrammar>>;
  std::shared_ptr<const TokenVocab> vocab_;
  size_t capacity_;
  std::mutex mu_;
  std::list<Entry> lru_;  // most recent first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
};

}  // namespace pagoda::structured
