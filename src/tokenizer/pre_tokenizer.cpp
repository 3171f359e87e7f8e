#include <pcre2.h>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/text_pipeline.h"

namespace pagoda {

namespace {

// GPT-2's split pattern, used by ByteLevel(use_regex=true).
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// A compiled PCRE2 pattern (Unicode, JIT) that splits text into matches and
// the gaps between them (HF's "Isolated" behaviour).
class Regex {
 public:
  Regex(const std::string& pattern, const std::string& where) {
    int err = 0;
    PCRE2_SIZE offset = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.c_str()), pattern.size(),
                          PCRE2_UTF | PCRE2_UCP, &err, &offset, nullptr);
    if (!code_) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      throw_input_error("{}: split regex does not compile at {}: {}", where, offset,
                        reinterpret_cast<const char*>(msg));
    }
    pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT fails
  }
  ~Regex() { pcre2_code_free(code_); }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  void split(const std::string& text, std::vector<std::string>& out) const {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_, nullptr);
    size_t pos = 0, gap_start = 0;
    while (pos <= text.size()) {
      const int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), pos,
                                 PCRE2_NO_UTF_CHECK, md, nullptr);
      if (rc < 0) break;
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      const size_t begin = ov[0], end = ov[1];
      if (end == begin) {  // empty match: step over one character
        pos = begin + 1;
        while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
        continue;
      }
      if (begin > gap_start) out.push_back(text.substr(gap_start, begin - gap_start));
      out.push_back(text.substr(begin, end - begin));
      gap_start = pos = end;
    }
    if (gap_start < text.size()) out.push_back(text.substr(gap_start));
    pcre2_match_data_free(md);
  }

 private:
  pcre2_code* code_ = nullptr;
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts)
      : parts_(std::move(parts)) {}
  void apply(std::vector<std::string>& pieces) const override {
    for (const auto& p : parts_) p->apply(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(const std::string& pattern, const std::string& where)
      : regex_(pattern, where) {}
  void apply(std::vector<std::string>& pieces) const override {
    std::vector<std::string> out;
    for (const std::string& p : pieces) regex_.split(p, out);
    pieces.swap(out);
  }

 private:
  Regex regex_;
};

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex, const std::string& where)
      : add_prefix_space_(add_prefix_space) {
    if (use_regex) regex_ = std::make_unique<Regex>(kGpt2Pattern, where);
  }
  void apply(std::vector<std::string>& pieces) const override {
    std::vector<std::string> split;
    for (std::string& p : pieces) {
      if (add_prefix_space_ && !p.empty() && p[0] != ' ') p.insert(0, " ");
      if (regex_) {
        regex_->split(p, split);
      } else {
        split.push_back(std::move(p));
      }
    }
    for (std::string& p : split) p = byte_level::encode(p);
    pieces.swap(split);
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
};

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j,
                                                 const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string type = j.value("type", "");
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (const auto& p : j.at("pretokenizers")) {
      if (auto t = make_pre_tokenizer(p, where)) parts.push_back(std::move(t));
    }
    return std::make_unique<SequencePreTokenizer>(std::move(parts));
  }
  if (type == "Split") {
    const std::string behavior = j.value("behavior", "Isolated");
    if (behavior != "Isolated" || j.value("invert", false)) {
      throw_input_error("{}: Split pre-tokenizer behavior '{}' is not supported (only Isolated)",
                        where, behavior);
    }
    const auto& pattern = j.at("pattern");
    std::string regex;
    if (pattern.contains("Regex")) {
      regex = pattern["Regex"].get<std::string>();
    } else {  // a literal string: quote it for PCRE2
      regex = "\\Q" + pattern.at("String").get<std::string>() + "\\E";
    }
    return std::make_unique<SplitPreTokenizer>(regex, where);
  }
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevelPreTokenizer>(j.value("add_prefix_space", false),
                                                   j.value("use_regex", true), where);
  }
  throw_input_error("{}: pre_tokenizer type '{}' is not supported", where, type);
}

}  // namespace pagoda
