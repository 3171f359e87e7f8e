#include "structured/token_vocab.h"

#include <algorithm>

#include "tokenizer/tokenizer.h"

namespace pagoda::structured {

TokenVocab::TokenVocab(const Tokenizer& tokenizer, int32_t size, std::vector<int32_t> eos_ids)
    : eos_ids_(std::move(eos_ids)) {
  bytes_.resize(static_cast<size_t>(size));
  const int32_t known = std::min(size, tokenizer.vocab_size());
  for (int32_t id = 0; id < known; ++id) {
    if (!tokenizer.is_special(id)) bytes_[id] = tokenizer.token_bytes(id);
  }
  build_trie();
}

TokenVocab::TokenVocab(std::vector<std::string> token_bytes, std::vector<int32_t> eos_ids)
    : bytes_(std::move(token_bytes)), eos_ids_(std::move(eos_ids)) {
  build_trie();
}

void TokenVocab::build_trie() {
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
