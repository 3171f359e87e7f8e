// The BPE model of tokenizer.json: vocabulary, ranked merges, byte fallback
// and unknown-token handling. Encodes one pre-tokenized piece at a time.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace pagoda {

class BpeModel {
 public:
  // `model` is tokenizer.json's "model" object; `where` names the file for errors.
  BpeModel(const nlohmann::json& model, const std::string& where);

  // Appends the ids of one piece (already normalized / byte-mapped).
  void encode(std::string_view piece, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  const std::string* id_to_token(int32_t id) const;  // nullptr if unknown
  int32_t max_id() const { return max_id_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t merged_id;
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  void initial_symbols(std::string_view piece, std::vector<int32_t>& symbols) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::optional<int32_t> unk_id_;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  int32_t byte_token_ids_[256];  // <0xNN> ids for byte fallback (-1 if absent)
  int32_t max_id_ = -1;
};

}  // namespace pagoda
