#include "tokenizer/bpe_model.h"

#include <queue>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace pagoda {

BpeModel::BpeModel(const nlohmann::json& model, const std::string& where) {
  const std::string type = model.value("type", std::string("BPE"));
  if (type != "BPE")
    throw_input_error("{}: tokenizer model type '{}' is not supported (only BPE)", where, type);
  if (!model.contains("vocab") || !model["vocab"].is_object()) {
    throw_input_error("{}: model.vocab must be an object", where);
  }
  for (const auto& [token, id] : model["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0) {
      throw_input_error("{}: vocab entry '{}' has no valid id", where, token);
    }
    const auto i = id.get<int32_t>();
    vocab_[token] = i;
    if (i >= static_cast<int32_t>(id_to_token_.size())) id_to_token_.resize(i + 1);
    id_to_token_[i] = token;
    max_id_ = std::max(max_id_, i);
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    const auto it = vocab_.find(name);
    byte_token_ids_[b] = it == vocab_.end() ? -1 : it->second;
  }
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    unk_id_ = token_to_id(model["unk_token"].get<std::string>());
  }
  byte_fallback_ = model.value("byte_fallback", false);
  fuse_unk_ = model.value("fuse_unk", false);
  ignore_merges_ = model.value("ignore_merges", false);
  if (model.contains("continuing_subword_prefix") &&
      model["continuing_subword_prefix"].is_string() &&
      !model["continuing_subword_prefix"].get<std::string>().empty()) {
    throw_input_error("{}: continuing_subword_prefix is not supported", where);
  }

  const auto& merges = model.contains("merges") ? model["merges"] : nlohmann::json::array();
  if (!merges.is_array()) throw_input_error("{}: model.merges must be a list", where);
  merges_.reserve(merges.size());
  int32_t rank = 0;
  for (const auto& m : merges) {
    std::string a, b;
    if (m.is_string()) {  // "a b"
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ', 1);
      if (space == std::string::npos) throw_input_error("{}: merge '{}' is not 'a b'", where, s);
      a = s.substr(0, space);
      b = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() &&
               m[1].is_string()) {  // ["a", "b"]
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      throw_input_error("{}: merge #{} must be \"a b\" or [\"a\", \"b\"]", where, rank);
    }
    const auto ia = vocab_.find(a), ib = vocab_.find(b), iab = vocab_.find(a + b);
    if (ia == vocab_.end() || ib == vocab_.end() || iab == vocab_.end()) {
      throw_input_error("{}: merge #{} ('{}' + '{}') uses tokens missing from the vocab", where,
                        rank, a, b);
    }
    merges_.emplace(pair_key(ia->second, ib->second), Merge{rank, iab->second});
    ++rank;
  }
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  const auto it = vocab_.find(std::string(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || id >= static_cast<int32_t>(id_to_token_.size()) || id_to_token_[id].empty()) {
    return nullptr;
  }
  return &id_to_token_[id];
}

void BpeModel::initial_symbols(std::string_view piece, std::vector<int32_t>& symbols) const {
  bool last_was_unk = false;
  for (size_t i = 0; i < piece.size();) {
    const size_t len = std::min<size_t>(utf8::sequence_length(static_cast<unsigned char>(piece[i])),
                                        piece.size() - i);
    const std::string ch(piece.substr(i, len));
    i += len;
    const auto it = vocab_.find(ch);
    if (it != vocab_.end()) {
      symbols.push_back(it->second);
      last_was_unk = false;
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (unsigned char b : ch) all = all && byte_token_ids_[b] >= 0;
      if (all) {
        for (unsigned char b : ch) symbols.push_back(byte_token_ids_[b]);
        last_was_unk = false;
        continue;
      }
    }
    if (!unk_id_) continue;  // no unk token: the character is dropped, as HF does
    if (!(fuse_unk_ && last_was_unk)) symbols.push_back(*unk_id_);
    last_was_unk = true;
  }
}

void BpeModel::encode(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (ignore_merges_) {
    const auto it = vocab_.find(std::string(piece));
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  thread_local std::vector<int32_t> sym;
  thread_local std::vector<int32_t> prev, next;
  sym.clear();
  initial_symbols(piece, sym);
  const auto n = static_cast<int32_t>(sym.size());
  if (n <= 1) {
    out.insert(out.end(), sym.begin(), sym.end());
    return;
  }
  prev.resize(n);
  next.resize(n);
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  // Candidate merges ordered by (rank, position); stale entries are skipped
  // when popped by re-checking that both symbols are unchanged.
  struct Candidate {
    int32_t rank, left, left_id, right_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto push = [&](int32_t left) {
    const int32_t right = next[left];
    if (left < 0 || right < 0) return;
    const auto it = merges_.find(pair_key(sym[left], sym[right]));
    if (it != merges_.end()) queue.push({it->second.rank, left, sym[left], sym[right]});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    const int32_t right = next[c.left];
    if (sym[c.left] != c.left_id || right < 0 || sym[right] != c.right_id) continue;
    sym[c.left] = merges_.at(pair_key(c.left_id, c.right_id)).merged_id;
    sym[right] = -1;  // removed
    next[c.left] = next[right];
    if (next[right] >= 0) prev[next[right]] = c.left;
    push(c.left);
    if (prev[c.left] >= 0) push(prev[c.left]);
  }
  for (int32_t i = 0; i >= 0; i = next[i]) out.push_back(sym[i]);
}

}  // namespace pagoda
