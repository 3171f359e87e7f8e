#include "structured/token_vocab.h"

#include <algorithm>

#include "tokenizer/tokenizer.h"

namespace pagoda::structured {

TokenVocab::TokenVocab(const Tokenizer& tokenizer, int32_t size, std::vector<int32_t> eos_ids)
    : eos_ids_(std::move(eos_ids)) {
  bytes_.resize(static_cast<size_t>(size));
  const int32_t known = std::min(size, tokenizer.vocab_size());
  for (int32_t id = 0; id < known; ++id) {
    if (tokenizer.is_special(id)) {
      special_ids_.emplace(tokenizer.token_bytes(id), id);
    } else {
      bytes_[id] = tokenizer.token_bytes(id);
    }
  }
  build_trie();
}

TokenVocab::TokenVocab(std::vector<std::string> token_bytes, std::vector<int32_t> eos_ids,
                       std::unordered_map<std::string, int32_t> special_ids)
    : bytes_(std::move(token_bytes)), eos_ids_(std::move(eos_ids)), special_ids_(std::move(special_ids)) {
  for (const auto& [text, id] : special_ids_) {
    if (id >= 0 && id < size()) bytes_[id].clear();
  }
  build_trie();
}

bool TokenVocab::is_eos(int32_t id) const {
  return std::find(eos_ids_.begin(), eos_ids_.end(), id) != eos_ids_.end();
}

std::optional<int32_t> TokenVocab::find_token(std::string_view text) const {
  if (const auto it = special_ids_.find(std::string(text)); it != special_ids_.end()) return it->second;
  // Down the trie, a byte at a time (a node's children are the preorder
  // runs after it).
  int32_t node = 0;
  for (char ch : text) {
    int32_t next = -1;
    for (int32_t c = node + 1; c < nodes_[node].end; c = nodes_[c].end) {
      if (nodes_[c].byte == static_cast<uint8_t>(ch)) {
        next = c;
        break;
      }
    }
    if (next < 0) return std::nullopt;
    node = next;
  }
  const Node& n = nodes_[node];
  if (node == 0 || n.own_end == n.token_begin) return std::nullopt;
  return sorted_ids_[n.token_begin];  // ties were sorted by id
}

void TokenVocab::build_trie() {
  for (const auto& [text, id] : special_ids_) special_text_.emplace(id, text);
  for (int32_t id : eos_ids_) {
    if (id >= 0 && id < size()) bytes_[id].clear();
  }
  for (int32_t id = 0; id < size(); ++id) {
    if (!bytes_[id].empty()) sorted_ids_.push_back(id);
  }
  std::sort(sorted_ids_.begin(), sorted_ids_.end(),
            [&](int32_t a, int32_t b) { return bytes_[a] < bytes_[b] || (bytes_[a] == bytes_[b] && a < b); });
  nodes_.clear();
  nodes_.push_back(Node{});  // the root
  std::vector<int32_t> path = {0};  // path[d]: the node at depth d on the current token's path
  auto close = [&](int32_t node, int32_t token_index) {
    nodes_[node].end = static_cast<int32_t>(nodes_.size());
    nodes_[node].token_end = token_index;
  };
  const std::string* prev = nullptr;
  for (size_t k = 0; k < sorted_ids_.size(); ++k) {
    const auto index = static_cast<int32_t>(k);
    const std::string& b = bytes_[sorted_ids_[k]];
    size_t common = 0;
    if (prev) {
      while (common < b.size() && common < prev->size() && b[common] == (*prev)[common]) ++common;
    }
    while (path.size() > common + 1) {
      close(path.back(), index);
      path.pop_back();
    }
    for (size_t d = common; d < b.size(); ++d) {
      Node n;
      n.parent = path.back();
      n.token_begin = index;
      n.own_end = index;
      n.depth = static_cast<int32_t>(d + 1);
      n.byte = static_cast<uint8_t>(b[d]);
      path.push_back(static_cast<int32_t>(nodes_.size()));
      nodes_.push_back(n);
    }
    nodes_[path.back()].own_end = index + 1;  // tokens ending here come first (sorted)
    token_node_.push_back(path.back());
    prev = &b;
  }
  while (!path.empty()) {
    close(path.back(), static_cast<int32_t>(sorted_ids_.size()));
    path.pop_back();
  }
  for (size_t i = nodes_.size(); i-- > 1;) {
    Node& n = nodes_[i];
    if (n.own_end > n.token_begin) n.max_len = std::max(n.max_len, n.depth);
    Node& p = nodes_[n.parent];
    p.max_len = std::max(p.max_len, n.max_len);
  }
}

}  // namespace pagoda::structured
