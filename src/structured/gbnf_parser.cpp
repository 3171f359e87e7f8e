#include "structured/gbnf_parser.h"

#include <algorithm>
#include <limits>
#include <unordered_map>

#include "core/error.h"
#include "structured/utf8_ranges.h"

namespace pagoda::structured {

namespace {

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) {}

  Grammar parse() {
    skip_space();
    while (pos_ < s_.size()) {
      const size_t at = pos_;
      const std::string name = parse_name();
      if (name.empty()) fail(at, "expected a rule name");
      skip_space();
      if (s_.substr(pos_, 3) != "::=") fail(pos_, "expected '::=' after rule name '" + name + "'");
      pos_ += 3;
      const int32_t index = rule_index(name);
      if (defined_[index]) fail(at, "rule '" + name + "' is defined twice");
      defined_[index] = true;
      g_.rules[index].alternatives = parse_alternatives(name, false);
    }
    for (size_t r = 0; r < g_.rules.size(); ++r) {
      if (!defined_[r]) throw_input_error("grammar: rule '{}' is used but never defined", g_.rules[r].name);
    }
    const auto root = names_.find("root");
    if (root == names_.end()) throw_input_error("grammar: no 'root' rule");
    move_root_first(root->second);
    g_.validate();
    return std::move(g_);
  }

 private:
  [[noreturn]] void fail(size_t at, const std::string& what) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    throw_input_error("grammar: line {} column {}: {}", line, col, what);
  }

  void skip_space() {
    while (pos_ < s_.size()) {
      if (s_[pos_] == '#') {
        while (pos_ < s_.size() && s_[pos_] != '\n') ++pos_;
      } else if (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r') {
        ++pos_;
      } else {
        break;
      }
    }
  }

  std::string parse_name() {
    const size_t start = pos_;
    while (pos_ < s_.size() && is_name_char(s_[pos_])) ++pos_;
    return std::string(s_.substr(start, pos_ - start));
  }

  // Whether a rule definition ("name ::=") starts at pos_.
  bool at_definition() const {
    size_t p = pos_;
    while (p < s_.size() && is_name_char(s_[p])) ++p;
    if (p == pos_) return false;
    while (p < s_.size() && (s_[p] == ' ' || s_[p] == '\t' || s_[p] == '\n' || s_[p] == '\r')) ++p;
    return s_.substr(p, 3) == "::=";
  }

  int32_t rule_index(const std::string& name) {
    const auto it = names_.find(name);
    if (it != names_.end()) return it->second;
    const auto index = static_cast<int32_t>(g_.rules.size());
    g_.rules.push_back(Rule{name, {}});
    defined_.push_back(false);
    names_[name] = index;
    return index;
  }

  int32_t anonymous_rule(const std::string& parent, std::vector<std::vector<Element>> alts) {
    const std::string name = parent + "-" + std::to_string(g_.rules.size());
    const int32_t index = rule_index(name);
    defined_[index] = true;
    g_.rules[index].alternatives = std::move(alts);
    return index;
  }

  std::vector<std::vector<Element>> parse_alternatives(const std::string& rule, bool nested) {
    std::vector<std::vector<Element>> alts;
    alts.push_back(parse_sequence(rule, nested));
    while (pos_ < s_.size() && s_[pos_] == '|') {
      ++pos_;
      alts.push_back(parse_sequence(rule, nested));
    }
    return alts;
  }

  std::vector<Element> parse_sequence(const std::string& rule, bool nested) {
    std::vector<Element> seq;
    for (;;) {
      skip_space();
      if (pos_ >= s_.size()) break;
      const char c = s_[pos_];
      if (c == '|' || c == ')') break;
      if (!nested && at_definition()) break;
      Element e;
      const size_t at = pos_;
      if (c == '"') {
        e.kind = Element::Kind::Literal;
        e.literal = parse_literal();
        if (e.literal.empty()) {  // "" matches nothing: leave it out
          skip_quantifier_of_empty(at);
          continue;
        }
      } else if (c == '[') {
        e.kind = Element::Kind::Class;
        e.ranges = parse_class();
      } else if (c == '<') {
        e.kind = Element::Kind::Token;
        parse_token(e);
      } else if (c == '.') {
        ++pos_;
        e.kind = Element::Kind::Class;
        e.ranges = {{0, kMaxCodePoint}};
      } else if (c == '(') {
        ++pos_;
        // Bounded, as the parser recurses once per level (regexes and
        // schemas become one or two levels per level of their own).
        if (++depth_ > kMaxNesting) fail(at, "groups nested deeper than " + std::to_string(kMaxNesting));
        auto alts = parse_alternatives(rule, true);
        --depth_;
        skip_space();
        if (pos_ >= s_.size() || s_[pos_] != ')') fail(at, "unclosed '('");
        ++pos_;
        e.kind = Element::Kind::RuleRef;
        e.rule = anonymous_rule(rule, std::move(alts));
      } else if (is_name_char(c)) {
        e.kind = Element::Kind::RuleRef;
        e.rule = rule_index(parse_name());
      } else {
        fail(at, std::string("unexpected character '") + c + "'");
      }
      parse_quantifier(e);
      seq.push_back(std::move(e));
    }
    return seq;
  }

  void skip_quantifier_of_empty(size_t at) {
    Element dummy;
    parse_quantifier(dummy);
    (void)at;
  }

  void parse_quantifier(Element& e) {
    if (pos_ >= s_.size()) return;
    int32_t min = 1, max = 1;
    const size_t at = pos_;
    const char c = s_[pos_];
    if (c == '*') {
      min = 0, max = kUnbounded;
    } else if (c == '+') {
      min = 1, max = kUnbounded;
    } else if (c == '?') {
      min = 0, max = 1;
    } else if (c == '{') {
      ++pos_;
      min = parse_int(at);
      max = min;
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        skip_blanks();
        max = pos_ < s_.size() && s_[pos_] == '}' ? kUnbounded : parse_int(at);
      }
      skip_blanks();
      if (pos_ >= s_.size() || s_[pos_] != '}') fail(at, "expected '}' closing the repetition");
      if (max != kUnbounded && max < min) fail(at, "repetition {m,n} with n < m");
    } else {
      return;
    }
    ++pos_;
    // A quantified quantified element ("a*?" or "(x){2}*") nests a rule.
    if (e.min != 1 || e.max != 1) {
      Element inner = e;
      e = Element{};
      e.kind = Element::Kind::RuleRef;
      e.rule = anonymous_rule("q", {{std::move(inner)}});
    }
    e.min = min;
    e.max = max;
    parse_quantifier(e);
  }

  void skip_blanks() {
    while (pos_ < s_.size() && s_[pos_] == ' ') ++pos_;
  }

  int32_t parse_int(size_t at) {
    skip_blanks();
    const size_t start = pos_;
    int64_t v = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      v = v * 10 + (s_[pos_++] - '0');
      if (v > 100000) fail(at, "repetition count above 100000");
    }
    if (pos_ == start) fail(at, "expected a number in the repetition");
    skip_blanks();
    return static_cast<int32_t>(v);
  }

  // One escape after '\' (pos_ at the character after it), as a code point.
  uint32_t parse_escape(size_t at) {
    if (pos_ >= s_.size()) fail(at, "unfinished escape");
    const char c = s_[pos_++];
    auto hex = [&](int digits) {
      uint32_t v = 0;
      for (int i = 0; i < digits; ++i) {
        if (pos_ >= s_.size() || !std::isxdigit(static_cast<unsigned char>(s_[pos_])))
          fail(at, "bad hexadecimal escape");
        const char h = s_[pos_++];
        v = v * 16 + static_cast<uint32_t>(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
      }
      if (v > kMaxCodePoint) fail(at, "escape above U+10FFFF");
      return v;
    };
    switch (c) {
      case 'n': return '\n';
      case 'r': return '\r';
      case 't': return '\t';
      case 'x': return hex(2);
      case 'u': return hex(4);
      case 'U': return hex(8);
      case '\\': case '"': case '[': case ']': case '-': case '^': case '/': case '.':
        return static_cast<unsigned char>(c);
      default: fail(at, std::string("unknown escape '\\") + c + "'");
    }
  }

  // One code point of the text (UTF-8 decoded) or escape.
  uint32_t parse_char(size_t at) {
    if (s_[pos_] == '\\') {
      ++pos_;
      return parse_escape(at);
    }
    uint32_t cp = 0;
    const size_t n = utf8_decode_one(s_.substr(pos_), &cp);
    if (n == 0) fail(pos_, "invalid UTF-8");
    pos_ += n;
    return cp;
  }

  // <[ID]> or <TEXT> (pos_ at '<').
  void parse_token(Element& e) {
    const size_t at = pos_;
    const size_t close = s_.find('>', pos_ + 1);
    const size_t newline = s_.find('\n', pos_);
    if (close == std::string_view::npos || (newline != std::string_view::npos && newline < close))
      fail(at, "unclosed token '<' (write <[ID]> or <TEXT>)");
    const std::string_view inner = s_.substr(pos_ + 1, close - pos_ - 1);
    if (inner.size() >= 2 && inner.front() == '[' && inner.back() == ']') {
      const std::string_view digits = inner.substr(1, inner.size() - 2);
      int64_t id = 0;
      for (char d : digits) {
        if (d < '0' || d > '9') fail(at, "token <[ID]> needs a decimal id");
        id = id * 10 + (d - '0');
        if (id > std::numeric_limits<int32_t>::max()) fail(at, "token id out of range");
      }
      if (digits.empty()) fail(at, "token <[ID]> needs a decimal id");
      e.token = static_cast<int32_t>(id);
    } else {
      if (inner.empty()) fail(at, "empty token <>");
      e.literal = std::string(s_.substr(pos_, close - pos_ + 1));
    }
    pos_ = close + 1;
  }

  std::string parse_literal() {
    const size_t at = pos_++;
    std::string out;
    for (;;) {
      if (pos_ >= s_.size() || s_[pos_] == '\n') fail(at, "unclosed string literal");
      if (s_[pos_] == '"') break;
      // \xHH in a literal is the byte HH (as GBNF), other code points UTF-8.
      if (s_[pos_] == '\\' && pos_ + 1 < s_.size() && s_[pos_ + 1] == 'x') {
        ++pos_;
        out += static_cast<char>(parse_escape(at));
        continue;
      }
      out += utf8_encode(parse_char(at));
    }
    ++pos_;
    return out;
  }

  std::vector<std::pair<uint32_t, uint32_t>> parse_class() {
    const size_t at = pos_++;
    bool negated = false;
    if (pos_ < s_.size() && s_[pos_] == '^') {
      negated = true;
      ++pos_;
    }
    std::vector<std::pair<uint32_t, uint32_t>> ranges;
    for (;;) {
      if (pos_ >= s_.size()) fail(at, "unclosed character class");
      if (s_[pos_] == ']') break;
      const uint32_t lo = parse_char(at);
      uint32_t hi = lo;
      if (pos_ + 1 < s_.size() && s_[pos_] == '-' && s_[pos_ + 1] != ']') {
        ++pos_;
        hi = parse_char(at);
        if (hi < lo) fail(at, "character range out of order");
      }
      ranges.emplace_back(lo, hi);
    }
    ++pos_;
    ranges = normalize_ranges(std::move(ranges));
    if (negated) ranges = complement_ranges(ranges);
    if (ranges.empty()) fail(at, "character class matches nothing");
    return ranges;
  }

  void move_root_first(int32_t root) {
    if (root == 0) return;
    std::swap(g_.rules[0], g_.rules[root]);
    for (Rule& r : g_.rules) {
      for (auto& alt : r.alternatives) {
        for (Element& e : alt) {
          if (e.kind != Element::Kind::RuleRef) continue;
          if (e.rule == root) e.rule = 0;
          else if (e.rule == 0) e.rule = root;
        }
      }
    }
  }

  static constexpr int kMaxNesting = 256;
  std::string_view s_;
  size_t pos_ = 0;
  int depth_ = 0;
  Grammar g_;
  std::vector<bool> defined_;
  std::unordered_map<std::string, int32_t> names_;
};

}  // namespace

Grammar parse_gbnf(std::string_view text) { return Parser(text).parse(); }

}  // namespace pagoda::structured
