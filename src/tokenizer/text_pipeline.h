// The text stages of tokenizer.json around the BPE model: normalizer,
// pre-tokenizer and decoder, each built from its JSON description. Only the
// component types real Llama/Qwen/Mistral files use are supported; anything
// else is refused at load with its type name.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void apply(std::string& text) const = 0;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Splits each piece further (and may transform it, e.g. byte-level map).
  virtual void apply(std::vector<std::string>& pieces) const = 0;
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  // Transforms the list of token strings (HF decode_chain semantics).
  virtual void apply(std::vector<std::string>& tokens) const = 0;
};

// nullptr for a JSON null. Throw InputError naming `where` and the type.
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& j, const std::string& where);
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j, const std::string& where);
std::unique_ptr<Decoder> make_decoder(const nlohmann::json& j, const std::string& where);

}  // namespace pagoda
