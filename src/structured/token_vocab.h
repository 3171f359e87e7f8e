// The vocabulary as the grammar matcher sees it: each token id's bytes and
// a byte trie over them in preorder (tokens sorted by their bytes, so a
// subtree's tokens are one contiguous run and shared prefixes are matched
// once when a mask is computed). Special tokens and EOS are not in the
// trie: the mask allows a special token only where the grammar names it as
// a token terminal (<[id]> / <TEXT>), and EOS only when the grammar is
// complete.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace pagoda {
class Tokenizer;
}

namespace pagoda::structured {

class TokenVocab {
 public:
  struct Node {
    int32_t parent = -1;
    int32_t end = 0;          // preorder index just past this node's subtree
    int32_t token_begin = 0;  // the subtree's tokens: sorted_ids()[token_begin, token_end)
    int32_t token_end = 0;
    int32_t own_end = 0;      // [token_begin, own_end): the tokens ending at this node
    int32_t depth = 0;        // bytes from the root
    int32_t max_len = 0;      // longest token in the subtree, in bytes
    uint8_t byte = 0;
  };

  // `size`: the model's logits row length (it may exceed the tokenizer's
  // ids; the extra ids are never allowed).
  TokenVocab(const Tokenizer& tokenizer, int32_t size, std::vector<int32_t> eos_ids);
  // Bytes per id ("" = never allowed as bytes) and the special tokens'
  // texts (ids with no bytes that a grammar may name); for tests.
  TokenVocab(std::vector<std::string> token_bytes, std::vector<int32_t> eos_ids,
             std::unordered_map<std::string, int32_t> special_ids = {});

  int32_t size() const { return static_cast<int32_t>(bytes_.size()); }
  const std::string& bytes(int32_t id) const { return bytes_[id]; }
  const std::vector<int32_t>& eos_ids() const { return eos_ids_; }
  bool is_eos(int32_t id) const;
  // The id of the token whose text is `text`: a special token's, else the
  // lowest id whose bytes are exactly `text`; nullopt when none.
  std::optional<int32_t> find_token(std::string_view text) const;
  // Whether `id` is a special token (no bytes; matched only by id).
  bool is_special(int32_t id) const { return special_text_.count(id) > 0; }
  const std::vector<Node>& nodes() const { return nodes_; }  // nodes()[0] is the root
  const std::vector<int32_t>& sorted_ids() const { return sorted_ids_; }
  // The node where sorted_ids()[k] ends.
  int32_t token_node(int32_t k) const { return token_node_[k]; }

 private:
  void build_trie();

  std::vector<std::string> bytes_;
  std::vector<int32_t> eos_ids_;
  std::unordered_map<std::string, int32_t> special_ids_;  // special token text -> id
  std::unordered_map<int32_t, std::string> special_text_;
  std::vector<int32_t> sorted_ids_;
  std::vector<Node> nodes_;
  std::vector<int32_t> token_node_;
};

}  // namespace pagoda::structured
