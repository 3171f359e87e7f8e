// Hugging Face tokenizer.json (+ tokenizer_config.json) tokenizer:
// SentencePiece-style BPE with byte fallback (Llama-2) and byte-level BPE
// with a split regex (GPT-2 / Qwen2/3 / Llama-3), added and special tokens.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Reads DIR/tokenizer.json and, when present, DIR/tokenizer_config.json.
  // Throws InputError naming the file and the problem.
  static std::unique_ptr<Tokenizer> load(const std::string& dir);

  // add_special_tokens: apply the model's post-processing (BOS/EOS as the
  // config or post_processor says), like HF's encode(add_special_tokens=True).
  // Special/added tokens written literally in the text are recognised.
  virtual std::vector<int32_t> encode(std::string_view text,
                                      bool add_special_tokens = true) const = 0;
  // Invalid UTF-8 byte sequences decode to U+FFFD.
  virtual std::string decode(std::span<const int32_t> ids,
                             bool skip_special_tokens = true) const = 0;

  virtual int32_t vocab_size() const = 0;  // largest id + 1
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
  virtual std::string id_to_token(int32_t id) const = 0;  // raw vocab string
  virtual bool is_special(int32_t id) const = 0;
  // The bytes this token adds to decoded text, before any UTF-8 repair
  // (byte-level BPE unmapped, SentencePiece's "\u2581" as a space and
  // <0xNN> as the byte NN); an added token's content; "" for an unused id.
  // Constrained decoding matches grammars against these.
  virtual std::string token_bytes(int32_t id) const = 0;

  virtual std::optional<int32_t> bos_token_id() const = 0;
  virtual std::optional<int32_t> eos_token_id() const = 0;
  virtual const std::string& bos_token() const = 0;      // "" when none
  virtual const std::string& eos_token() const = 0;      // "" when none
  virtual const std::string& chat_template() const = 0;  // "" when none
};

// Turns a growing list of token ids into text pieces that are safe to emit
// as they come (for streaming): never a partial UTF-8 character, and the
// concatenation of all pieces equals decode(prompt + output) with
// decode(prompt) cut off (so SentencePiece leading-space rules come out
// right).
class IncrementalDetokenizer {
 public:
  IncrementalDetokenizer(const Tokenizer& tokenizer, std::span<const int32_t> prompt_ids,
                         bool skip_special_tokens = true);
  // Adds one generated id; returns the text that became final ("" if none).
  std::string push(int32_t id);
  // End of generation: returns what is still held back (an incomplete UTF-8
  // tail becomes U+FFFD).
  std::string flush();
  // Everything returned so far.
  const std::string& text() const { return text_; }

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_tokens_;
  std::vector<int32_t> ids_;
  size_t prefix_offset_ = 0;
  size_t read_offset_ = 0;
  std::string text_;
};

}  // namespace pagoda
