#include "structured/regex_to_grammar.h"

#include <fmt/format.h>

#include "core/error.h"
#include "structured/grammar.h"
#include "structured/utf8_ranges.h"

namespace pagoda::structured {

namespace {

const CodePointRanges kDigit = {{'0', '9'}};
const CodePointRanges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const CodePointRanges kSpace = {{'\t', '\r'}, {' ', ' '}};
// What a JSON string holds unescaped: no '"', '\\' or control characters.
const CodePointRanges kJsonChars = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, kMaxCodePoint}};

CodePointRanges intersect(const CodePointRanges& a, const CodePointRanges& b) {
  CodePointRanges out;
  for (const auto& [alo, ahi] : a)
    for (const auto& [blo, bhi] : b) {
      const uint32_t lo = std::max(alo, blo), hi = std::min(ahi, bhi);
      if (lo <= hi) out.emplace_back(lo, hi);
    }
  return normalize_ranges(std::move(out));
}

class RegexTranslator {
 public:
  RegexTranslator(std::string_view re, bool json) : s_(re), json_(json) {}

  std::string translate() {
    if (!s_.empty() && s_[0] == '^') ++pos_;
    std::string out = alternation();
    if (pos_ < s_.size()) {
      if (s_[pos_] == ')') fail("unbalanced ')'");
      fail("unexpected character");
    }
    return out;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw_input_error("regex '{}': {} at offset {}", s_, what, pos_);
  }

  bool at_end_anchor() const { return pos_ + 1 == s_.size() && s_[pos_] == '$'; }

  std::string alternation() {
    std::string out = "(" + sequence();
    while (pos_ < s_.size() && s_[pos_] == '|') {
      ++pos_;
      out += " | " + sequence();
    }
    return out + ")";
  }

  std::string sequence() {
    std::string out;
    while (pos_ < s_.size() && s_[pos_] != '|' && s_[pos_] != ')') {
      if (at_end_anchor()) {
        ++pos_;
        break;
      }
      std::string atom_text = atom();
      out += " " + atom_text + quantifier();
    }
    return out.empty() ? "" : out;
  }

  std::string quantifier() {
    if (pos_ >= s_.size()) return "";
    std::string q;
    const char c = s_[pos_];
    if (c == '*' || c == '+' || c == '?') {
      q = std::string(1, c);
      ++pos_;
    } else if (c == '{') {
      const size_t close = s_.find('}', pos_);
      if (close == std::string_view::npos) fail("unclosed '{'");
      const std::string_view body = s_.substr(pos_ + 1, close - pos_ - 1);
      for (char d : body)
        if (!(d >= '0' && d <= '9') && d != ',') fail("bad repetition {" + std::string(body) + "}");
      if (body.empty() || body[0] == ',') fail("bad repetition {" + std::string(body) + "}");
      q = "{" + std::string(body) + "}";
      pos_ = close + 1;
    } else {
      return "";
    }
    if (pos_ < s_.size() && s_[pos_] == '?') ++pos_;  // lazy: same strings
    if (pos_ < s_.size() && (s_[pos_] == '*' || s_[pos_] == '+' || s_[pos_] == '{'))
      fail("nested quantifier");
    return q;
  }

  std::string chars(CodePointRanges ranges) {
    if (json_) ranges = intersect(ranges, kJsonChars);
    if (ranges.empty()) fail("a class that matches no character allowed here");
    return gbnf_class(ranges);
  }

  std::string literal_char(uint32_t cp) {
    if (json_ && (cp == '"' || cp == '\\' || cp < 0x20))
      fail("a character a JSON string must escape (not supported in a pattern)");
    return gbnf_literal(utf8_encode(cp));
  }

  uint32_t next_code_point() {
    uint32_t cp = 0;
    const size_t n = utf8_decode_one(s_.substr(pos_), &cp);
    if (n == 0) fail("invalid UTF-8");
    pos_ += n;
    return cp;
  }

  uint32_t hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      if (pos_ >= s_.size() || !std::isxdigit(static_cast<unsigned char>(s_[pos_])))
        fail("bad hexadecimal escape");
      const char h = s_[pos_++];
      v = v * 16 + static_cast<uint32_t>(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
    }
    return v;
  }

  // After '\': a class (\d ...) into *cls, or a single code point.
  bool escape(CodePointRanges* cls, uint32_t* cp, bool in_class) {
    if (pos_ >= s_.size()) fail("trailing '\\'");
    const char c = s_[pos_++];
    switch (c) {
      case 'd': *cls = kDigit; return true;
      case 'w': *cls = kWord; return true;
      case 's': *cls = kSpace; return true;
      case 'D': *cls = complement_ranges(kDigit); return true;
      case 'W': *cls = complement_ranges(kWord); return true;
      case 'S': *cls = complement_ranges(kSpace); return true;
      case 'n': *cp = '\n'; return false;
      case 't': *cp = '\t'; return false;
      case 'r': *cp = '\r'; return false;
      case 'f': *cp = '\f'; return false;
      case 'v': *cp = '\v'; return false;
      case '0': *cp = 0; return false;
      case 'x': *cp = hex(2); return false;
      case 'u': *cp = hex(4); return false;
      case 'b':
        if (in_class) {
          *cp = '\b';
          return false;
        }
        fail("word boundaries (\\b) are not supported");
      case 'B': fail("word boundaries (\\B) are not supported");
      default:
        if (c >= '1' && c <= '9') fail("backreferences are not supported");
        if (std::isalnum(static_cast<unsigned char>(c))) fail(std::string("unknown escape \\") + c);
        --pos_;
        *cp = next_code_point();
        return false;
    }
  }

  std::string atom() {
    const char c = s_[pos_];
    if (c == '(') {
      ++pos_;
      if (s_.substr(pos_, 1) == "?") {
        if (s_.substr(pos_, 2) == "?:") {
          pos_ += 2;
        } else if (s_.substr(pos_, 3) == "?P<" || (s_.substr(pos_, 2) == "?<" && s_.substr(pos_, 3) != "?<=" && s_.substr(pos_, 3) != "?<!")) {
          const size_t close = s_.find('>', pos_);
          if (close == std::string_view::npos) fail("unclosed group name");
          pos_ = close + 1;
        } else if (s_.substr(pos_, 2) == "?=" || s_.substr(pos_, 2) == "?!" ||
                   s_.substr(pos_, 3) == "?<=" || s_.substr(pos_, 3) == "?<!") {
          fail("lookaround is not supported");
        } else {
          fail("group flags are not supported");
        }
      }
      // Nesting is bounded: the translation (and the grammar's parser
      // after it) recurse once per level.
      if (++depth_ > kMaxNesting) fail("groups nested deeper than " + std::to_string(kMaxNesting));
      std::string inner = alternation();
      --depth_;
      if (pos_ >= s_.size() || s_[pos_] != ')') fail("unclosed '('");
      ++pos_;
      return inner;
    }
    if (c == '[') return char_class();
    if (c == '.') {
      ++pos_;
      return chars(complement_ranges({{'\n', '\n'}}));
    }
    if (c == '^' || c == '$') fail("anchors are only supported at the ends");
    if (c == '*' || c == '+' || c == '?' || c == '{') fail("quantifier without a target");
    if (c == '\\') {
      ++pos_;
      CodePointRanges cls;
      uint32_t cp = 0;
      if (escape(&cls, &cp, false)) return chars(cls);
      return literal_char(cp);
    }
    return literal_char(next_code_point());
  }

  std::string char_class() {
    ++pos_;
    bool negated = false;
    if (pos_ < s_.size() && s_[pos_] == '^') {
      negated = true;
      ++pos_;
    }
    CodePointRanges ranges;
    bool first = true;
    for (;;) {
      if (pos_ >= s_.size()) fail("unclosed '['");
      if (s_[pos_] == ']' && !first) break;
      first = false;
      uint32_t lo = 0;
      if (s_[pos_] == '\\') {
        ++pos_;
        CodePointRanges cls;
        if (escape(&cls, &lo, true)) {
          ranges.insert(ranges.end(), cls.begin(), cls.end());
          continue;
        }
      } else {
        if (s_.substr(pos_, 2) == "[:") fail("POSIX classes are not supported");
        lo = next_code_point();
      }
      uint32_t hi = lo;
      if (pos_ + 1 < s_.size() && s_[pos_] == '-' && s_[pos_ + 1] != ']') {
        ++pos_;
        if (s_[pos_] == '\\') {
          ++pos_;
          CodePointRanges cls;
          if (escape(&cls, &hi, true)) fail("a class escape cannot end a range");
        } else {
          hi = next_code_point();
        }
        if (hi < lo) fail("character range out of order");
      }
      ranges.emplace_back(lo, hi);
    }
    ++pos_;
    ranges = normalize_ranges(std::move(ranges));
    if (negated) ranges = complement_ranges(ranges);
    return chars(ranges);
  }

  static constexpr int kMaxNesting = 64;
  std::string_view s_;
  bool json_;
  size_t pos_ = 0;
  int depth_ = 0;
};

std::string class_char(uint32_t cp) {
  if ((cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z'))
    return std::string(1, static_cast<char>(cp));
  return cp < 0x100 ? fmt::format("\\x{:02X}", cp) : fmt::format("\\U{:08X}", cp);
}

}  // namespace

std::string gbnf_literal(std::string_view bytes) {
  std::string out = "\"";
  for (unsigned char c : bytes) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7F) {
      out += fmt::format("\\x{:02X}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string gbnf_class(const CodePointRanges& ranges) {
  std::string out = "[";
  for (const auto& [lo, hi] : ranges) {
    out += class_char(lo);
    if (hi != lo) out += "-" + class_char(hi);
  }
  return out + "]";
}

std::string regex_to_gbnf_expression(std::string_view regex, bool json_string) {
  return RegexTranslator(regex, json_string).translate();
}

std::string regex_to_gbnf(std::string_view regex) {
  return "root ::= " + regex_to_gbnf_expression(regex, false) + "\n";
}

}  // namespace pagoda::structured
