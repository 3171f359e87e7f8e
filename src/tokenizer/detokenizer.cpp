// Incremental detokenization, the vLLM way: decode a small window of recent
// ids twice (without and with the new ones) and emit the difference once
// it no longer ends inside a UTF-8 character.
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace pagoda {

namespace {

// Ids of prompt context kept in the window: enough for decoders whose output
// depends on the preceding token (e.g. SentencePiece's leading-space strip).
constexpr size_t kPromptContext = 5;

bool ends_in_partial_char(const std::string& text) {
  return text.size() >= 3 && text.compare(text.size() - 3, 3, utf8::kReplacement) == 0;
}

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer,
                                               std::span<const int32_t> prompt_ids,
                                               bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {
  const size_t keep = std::min(prompt_ids.size(), kPromptContext + 1);
  ids_.assign(prompt_ids.end() - static_cast<std::ptrdiff_t>(keep), prompt_ids.end());
  read_offset_ = ids_.size();
  prefix_offset_ = ids_.size() > kPromptContext ? ids_.size() - kPromptContext : 0;
}

std::string IncrementalDetokenizer::push(int32_t id) {
  ids_.push_back(id);
  const std::span<const int32_t> all(ids_);
  const std::string prefix_text = tokenizer_.decode(
      all.subspan(prefix_offset_, read_offset_ - prefix_offset_), skip_special_tokens_);
  const std::string new_text = tokenizer_.decode(all.subspan(prefix_offset_), skip_special_tokens_);
  if (new_text.size() <= prefix_text.size() || ends_in_partial_char(new_text)) return "";
  std::string delta = new_text.substr(prefix_text.size());
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  // Keep the window small: drop ids before the prefix.
  if (prefix_offset_ > 64) {
    ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(prefix_offset_));
    read_offset_ -= prefix_offset_;
    prefix_offset_ = 0;
  }
  text_ += delta;
  return delta;
}

std::string IncrementalDetokenizer::flush() {
  if (read_offset_ >= ids_.size()) return "";
  const std::span<const int32_t> all(ids_);
  const std::string prefix_text = tokenizer_.decode(
      all.subspan(prefix_offset_, read_offset_ - prefix_offset_), skip_special_tokens_);
  const std::string new_text = tokenizer_.decode(all.subspan(prefix_offset_), skip_special_tokens_);
  read_offset_ = prefix_offset_ = ids_.size();
  if (new_text.size() <= prefix_text.size()) return "";
  std::string delta = new_text.substr(prefix_text.size());
  text_ += delta;
  return delta;
}

}  // namespace pagoda
