// Tokenizer::load: the tokenizer.json pipeline (added tokens -> normalizer ->
// pre-tokenizer -> BPE -> post-processor, and the decoder) plus the
// special-token settings of tokenizer_config.json.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <unordered_map>

#include "core/error.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/text_pipeline.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace pagoda {

namespace {

using nlohmann::json;

json read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw_input_error("{}: cannot open", path);
  try {
    return json::parse(in);
  } catch (const json::parse_error& e) {
    throw_input_error("{}: invalid JSON: {}", path, e.what());
  }
}

// A token string from tokenizer_config.json: "x" or {"content": "x", ...}.
std::string config_token(const json& cfg, const char* key) {
  if (!cfg.contains(key)) return "";
  const json& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  return "";
}

struct AddedToken {
  int32_t id;
  std::string content;
  bool special;
  bool lstrip, rstrip;
};

// transformers' clean_up_tokenization: drops the space before punctuation
// and English contractions, in this order.
std::string clean_up_tokenization(std::string text) {
  static const std::pair<std::string_view, std::string_view> kRules[] = {
      {" .", "."},     {" ?", "?"},   {" !", "!"},   {" ,", ","},     {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : kRules) {
    for (size_t i = 0; (i = text.find(from, i)) != std::string::npos; i += to.size()) {
      text.replace(i, from.size(), to);
    }
  }
  return text;
}

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

class HfTokenizer final : public Tokenizer {
 public:
  explicit HfTokenizer(const std::string& dir);

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const override;
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const override;
  int32_t vocab_size() const override { return vocab_size_; }
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  std::string id_to_token(int32_t id) const override;
  std::string token_bytes(int32_t id) const override;
  bool is_special(int32_t id) const override {
    const auto it = added_by_id_.find(id);
    return it != added_by_id_.end() && it->second->special;
  }
  std::optional<int32_t> bos_token_id() const override { return bos_id_; }
  std::optional<int32_t> eos_token_id() const override { return eos_id_; }
  const std::string& bos_token() const override { return bos_token_; }
  const std::string& eos_token() const override { return eos_token_; }
  const std::string& chat_template() const override { return chat_template_; }

 private:
  void encode_segment(std::string segment, std::vector<int32_t>& out) const;
  void load_post_processor(const json& j, const std::string& where);

  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<Decoder> decoder_;
  std::vector<AddedToken> added_;
  std::unordered_map<int32_t, const AddedToken*> added_by_id_;
  std::unordered_map<std::string, int32_t> added_by_content_;
  // Added tokens by first byte, longest first, for leftmost-longest matching.
  std::vector<const AddedToken*> added_by_first_byte_[256];
  std::vector<int32_t> prefix_ids_, suffix_ids_;  // added by post-processing
  int32_t vocab_size_ = 0;
  std::optional<int32_t> bos_id_, eos_id_;
  std::string bos_token_, eos_token_, chat_template_;
  bool clean_up_tokenization_spaces_ = false;
  bool byte_level_decoder_ = false;  // the decoder unmaps GPT-2's byte characters
};

// Whether a decoder description (or a part of its Sequence) is ByteLevel.
bool has_byte_level_decoder(const json& d) {
  if (!d.is_object()) return false;
  if (d.value("type", "") == "ByteLevel") return true;
  if (d.contains("decoders") && d["decoders"].is_array()) {
    for (const auto& p : d["decoders"])
      if (has_byte_level_decoder(p)) return true;
  }
  return false;
}

HfTokenizer::HfTokenizer(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string path = (fs::path(dir) / "tokenizer.json").string();
  if (!fs::exists(path))
    throw_input_error("{}: missing (the model directory needs a tokenizer.json)", path);
  const json j = read_json_file(path);
  if (!j.is_object() || !j.contains("model")) throw_input_error("{}: no \"model\" section", path);
  try {
    model_ = std::make_unique<BpeModel>(j["model"], path);
    normalizer_ = make_normalizer(j.value("normalizer", json()), path);
    pre_tokenizer_ = make_pre_tokenizer(j.value("pre_tokenizer", json()), path);
    decoder_ = make_decoder(j.value("decoder", json()), path);
    byte_level_decoder_ = has_byte_level_decoder(j.value("decoder", json()));
  } catch (const json::exception& e) {
    throw_input_error("{}: malformed tokenizer: {}", path, e.what());
  }
  vocab_size_ = model_->max_id() + 1;

  if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
    added_.reserve(j["added_tokens"].size());
    for (const auto& a : j["added_tokens"]) {
      if (!a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
          !a["content"].is_string() || a["content"].get<std::string>().empty()) {
        throw_input_error("{}: malformed added_tokens entry {}", path, a.dump());
      }
      added_.push_back({a["id"].get<int32_t>(), a["content"].get<std::string>(),
                        a.value("special", false), a.value("lstrip", false),
                        a.value("rstrip", false)});
    }
  }
  for (const AddedToken& a : added_) {
    added_by_id_[a.id] = &a;
    added_by_content_[a.content] = a.id;
    added_by_first_byte_[static_cast<unsigned char>(a.content[0])].push_back(&a);
    vocab_size_ = std::max(vocab_size_, a.id + 1);
  }
  for (auto& list : added_by_first_byte_) {
    std::stable_sort(list.begin(), list.end(), [](const AddedToken* a, const AddedToken* b) {
      return a->content.size() > b->content.size();
    });
  }
  load_post_processor(j.value("post_processor", json()), path);

  const std::string config_path = (fs::path(dir) / "tokenizer_config.json").string();
  if (fs::exists(config_path)) {
    const json cfg = read_json_file(config_path);
    bos_token_ = config_token(cfg, "bos_token");
    eos_token_ = config_token(cfg, "eos_token");
    if (!bos_token_.empty()) bos_id_ = token_to_id(bos_token_);
    if (!eos_token_.empty()) eos_id_ = token_to_id(eos_token_);
    if (cfg.contains("chat_template")) {
      const json& t = cfg["chat_template"];
      if (t.is_string()) {
        chat_template_ = t.get<std::string>();
      } else if (t.is_array()) {  // [{"name": "default", "template": ...}, ...]
        for (const auto& e : t) {
          if (e.value("name", "") == "default" && e.contains("template"))
            chat_template_ = e["template"];
        }
      }
    }
    if (cfg.contains("clean_up_tokenization_spaces") &&
        cfg["clean_up_tokenization_spaces"].is_boolean()) {
      clean_up_tokenization_spaces_ = cfg["clean_up_tokenization_spaces"].get<bool>();
    }
    // Like transformers' Llama tokenizers: explicit add_bos/eos_token flags
    // decide what encode(add_special_tokens=True) adds.
    if (cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean()) {
      prefix_ids_.clear();
      if (cfg["add_bos_token"].get<bool>() && bos_id_) prefix_ids_.push_back(*bos_id_);
    }
    if (cfg.contains("add_eos_token") && cfg["add_eos_token"].is_boolean()) {
      suffix_ids_.clear();
      if (cfg["add_eos_token"].get<bool>() && eos_id_) suffix_ids_.push_back(*eos_id_);
    }
  }
}

void HfTokenizer::load_post_processor(const json& j, const std::string& where) {
  if (j.is_null()) return;
  const std::string type = j.value("type", "");
  if (type == "ByteLevel" || type == "RobertaProcessing") return;  // no ids added for single inputs
  if (type == "Sequence") {
    for (const auto& p : j.at("processors")) load_post_processor(p, where);
    return;
  }
  if (type != "TemplateProcessing")
    throw_input_error("{}: post_processor type '{}' is not supported", where, type);
  const json& specials = j.value("special_tokens", json::object());
  bool after_sequence = false;
  for (const auto& piece : j.at("single")) {
    if (piece.contains("Sequence")) {
      after_sequence = true;
      continue;
    }
    const std::string name = piece.at("SpecialToken").at("id").get<std::string>();
    std::vector<int32_t> ids;
    if (specials.contains(name) && specials[name].contains("ids")) {
      ids = specials[name]["ids"].get<std::vector<int32_t>>();
    } else if (auto id = token_to_id(name)) {
      ids.push_back(*id);
    } else {
      throw_input_error("{}: post_processor names unknown token '{}'", where, name);
    }
    auto& target = after_sequence ? suffix_ids_ : prefix_ids_;
    target.insert(target.end(), ids.begin(), ids.end());
  }
}

std::optional<int32_t> HfTokenizer::token_to_id(std::string_view token) const {
  const auto it = added_by_content_.find(std::string(token));
  if (it != added_by_content_.end()) return it->second;
  return model_->token_to_id(token);
}

std::string HfTokenizer::token_bytes(int32_t id) const {
  const auto added = added_by_id_.find(id);
  if (added != added_by_id_.end()) return added->second->content;
  const std::string* t = model_->id_to_token(id);
  if (!t) return "";
  if (byte_level_decoder_) return byte_level::decode(*t);
  unsigned value;
  if (t->size() == 6 && t->compare(0, 3, "<0x") == 0 && (*t)[5] == '>' &&
      std::sscanf(t->c_str() + 3, "%2X", &value) == 1) {
    return std::string(1, static_cast<char>(value));
  }
  std::string out = *t;
  static const std::string kMetaspace = "\xE2\x96\x81";  // U+2581
  for (size_t i = 0; (i = out.find(kMetaspace, i)) != std::string::npos; ++i)
    out.replace(i, kMetaspace.size(), " ");
  return out;
}

std::string HfTokenizer::id_to_token(int32_t id) const {
  const auto it = added_by_id_.find(id);
  if (it != added_by_id_.end()) return it->second->content;
  const std::string* t = model_->id_to_token(id);
  return t ? *t : std::string();
}

void HfTokenizer::encode_segment(std::string segment, std::vector<int32_t>& out) const {
  if (segment.empty()) return;
  if (normalizer_) normalizer_->apply(segment);
  std::vector<std::string> pieces{std::move(segment)};
  if (pre_tokenizer_) pre_tokenizer_->apply(pieces);
  for (const std::string& p : pieces) model_->encode(p, out);
}

std::vector<int32_t> HfTokenizer::encode(std::string_view raw, bool add_special_tokens) const {
  // Invalid UTF-8 in the input is replaced, so every later stage sees valid text.
  const std::string text = utf8::lossy(raw);
  std::vector<int32_t> ids;
  if (add_special_tokens) ids = prefix_ids_;
  // Split out added tokens (leftmost-longest), encoding the text between them.
  size_t segment_start = 0;
  std::string pending;  // text before the next added token
  for (size_t i = 0; i < text.size();) {
    const AddedToken* hit = nullptr;
    for (const AddedToken* a : added_by_first_byte_[static_cast<unsigned char>(text[i])]) {
      if (text.compare(i, a->content.size(), a->content) == 0) {
        hit = a;
        break;
      }
    }
    if (!hit) {
      ++i;
      continue;
    }
    size_t before_end = i;
    if (hit->lstrip) {
      while (before_end > segment_start && is_space(text[before_end - 1])) --before_end;
    }
    encode_segment(text.substr(segment_start, before_end - segment_start), ids);
    ids.push_back(hit->id);
    i += hit->content.size();
    if (hit->rstrip) {
      while (i < text.size() && is_space(text[i])) ++i;
    }
    segment_start = i;
  }
  encode_segment(text.substr(segment_start), ids);
  if (add_special_tokens) ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
  return ids;
}

std::string HfTokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    const auto added = added_by_id_.find(id);
    if (added != added_by_id_.end()) {
      if (!(skip_special_tokens && added->second->special))
        tokens.push_back(added->second->content);
      continue;
    }
    if (const std::string* t = model_->id_to_token(id)) tokens.push_back(*t);
  }
  if (decoder_) decoder_->apply(tokens);
  std::string out;
  for (const std::string& t : tokens) out += t;
  if (clean_up_tokenization_spaces_) out = clean_up_tokenization(std::move(out));
  return utf8::lossy(out);
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::load(const std::string& dir) {
  return std::make_unique<HfTokenizer>(dir);
}

}  // namespace pagoda
