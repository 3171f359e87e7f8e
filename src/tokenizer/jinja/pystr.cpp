// Python's str semantics on UTF-8 text (see pystr.h).
#include "tokenizer/jinja/pystr.h"

#include <unicode/ucasemap.h>
#include <unicode/uchar.h>
#include <unicode/utf8.h>

#include <algorithm>
#include <string_view>

#include "tokenizer/jinja/support.h"

namespace pagoda::jinja {

namespace {

// One code point of a string and its bytes [begin, end); cp < 0 for an
// ill-formed byte sequence.
struct CodePoint {
  int32_t cp;
  size_t begin, end;
};

std::vector<CodePoint> decode(const std::string& s) {
  std::vector<CodePoint> out;
  out.reserve(s.size());
  const auto* bytes = reinterpret_cast<const uint8_t*>(s.data());
  const int64_t n = static_cast<int64_t>(s.size());
  for (int64_t i = 0; i < n;) {
    const int64_t begin = i;
    UChar32 c;
    U8_NEXT(bytes, i, n, c);
    out.push_back({c, static_cast<size_t>(begin), static_cast<size_t>(i)});
  }
  return out;
}

std::string_view bytes_of(const std::string& s, const CodePoint& c) {
  return std::string_view(s).substr(c.begin, c.end - c.begin);
}

bool is_space(const CodePoint& c) { return c.cp >= 0 && python_isspace(c.cp); }
bool cased(int32_t cp) { return cp >= 0 && u_hasBinaryProperty(cp, UCHAR_CASED); }
bool case_ignorable(int32_t cp) { return cp >= 0 && u_hasBinaryProperty(cp, UCHAR_CASE_IGNORABLE); }
bool is_upper(int32_t cp) { return cp >= 0 && u_hasBinaryProperty(cp, UCHAR_UPPERCASE); }
bool is_lower(int32_t cp) { return cp >= 0 && u_hasBinaryProperty(cp, UCHAR_LOWERCASE); }
bool is_title(int32_t cp) { return cp >= 0 && u_charType(cp) == U_TITLECASE_LETTER; }
// CPython: letters are categories Lu, Ll, Lt, Lm, Lo (as ICU's u_isalpha).
bool is_alpha(int32_t cp) { return cp >= 0 && u_isalpha(cp); }
int numeric_type(int32_t cp) {
  return cp >= 0 ? u_getIntPropertyValue(cp, UCHAR_NUMERIC_TYPE) : U_NT_NONE;
}
// str.isdigit: Numeric_Type Decimal or Digit ('²' is a digit, '½' is not).
bool is_digit(int32_t cp) {
  const int t = numeric_type(cp);
  return t == U_NT_DECIMAL || t == U_NT_DIGIT;
}
// str.isalnum: isalpha, isdecimal, isdigit or isnumeric (any Numeric_Type).
bool is_alnum(int32_t cp) { return is_alpha(cp) || numeric_type(cp) != U_NT_NONE; }

enum class Case { Upper, Lower, Title };

// Root-locale case maps (Python's mappings are locale-independent). The
// title map treats its input as one word, so mapping one code point gives
// that code point's full titlecase mapping. One pair per thread: ICU does
// not promise a UCaseMap may be used by several threads at once.
struct CaseMaps {
  UCaseMap* plain = nullptr;
  UCaseMap* title = nullptr;
  CaseMaps() {
    UErrorCode err = U_ZERO_ERROR;
    plain = ucasemap_open("", 0, &err);
    title = ucasemap_open(
        "", U_TITLECASE_WHOLE_STRING | U_TITLECASE_NO_LOWERCASE | U_TITLECASE_NO_BREAK_ADJUSTMENT,
        &err);
    if (U_FAILURE(err)) fail(0, std::string("ICU case mapping unavailable: ") + u_errorName(err));
  }
  ~CaseMaps() {
    ucasemap_close(plain);
    ucasemap_close(title);
  }
  CaseMaps(const CaseMaps&) = delete;
  CaseMaps& operator=(const CaseMaps&) = delete;
};

CaseMaps& case_maps() {
  thread_local CaseMaps maps;
  return maps;
}

// The full case mapping of one code point (one to three code points).
void append_mapped(std::string& out, const std::string& s, const CodePoint& c, Case kind) {
  const std::string_view src = bytes_of(s, c);
  if (c.cp < 0) {
    out += src;
    return;
  }
  char buf[64];
  UErrorCode err = U_ZERO_ERROR;
  CaseMaps& maps = case_maps();
  const auto len = static_cast<int32_t>(src.size());
  int32_t n = 0;
  switch (kind) {
    case Case::Upper:
      n = ucasemap_utf8ToUpper(maps.plain, buf, sizeof buf, src.data(), len, &err);
      break;
    case Case::Lower:
      n = ucasemap_utf8ToLower(maps.plain, buf, sizeof buf, src.data(), len, &err);
      break;
    case Case::Title:
      n = ucasemap_utf8ToTitle(maps.title, buf, sizeof buf, src.data(), len, &err);
      break;
  }
  if (U_FAILURE(err)) fail(0, std::string("ICU case mapping failed: ") + u_errorName(err));
  out.append(buf, static_cast<size_t>(n));
}

// Unicode's Final_Sigma condition, which str.lower() applies to U+03A3: a
// cased letter before it and none after it, skipping case-ignorable
// characters (apostrophes, combining marks) both ways.
bool final_sigma(const std::vector<CodePoint>& cps, size_t i) {
  bool cased_before = false;
  for (size_t j = i; j-- > 0;) {
    if (case_ignorable(cps[j].cp)) continue;
    cased_before = cased(cps[j].cp);
    break;
  }
  if (!cased_before) return false;
  for (size_t j = i + 1; j < cps.size(); ++j) {
    if (case_ignorable(cps[j].cp)) continue;
    return !cased(cps[j].cp);
  }
  return true;
}

// str.lower() of the code point at i, in the context of the whole string.
void append_lower_at(std::string& out, const std::string& s, const std::vector<CodePoint>& cps,
                     size_t i) {
  if (cps[i].cp == 0x3A3) {
    out += final_sigma(cps, i) ? "\u03C2" : "\u03C3";
    return;
  }
  append_mapped(out, s, cps[i], Case::Lower);
}

template <typename Pred>
bool all_of_nonempty(const std::string& s, Pred pred) {
  const std::vector<CodePoint> cps = decode(s);
  return !cps.empty() &&
         std::all_of(cps.begin(), cps.end(), [&](const CodePoint& c) { return pred(c.cp); });
}

std::string substr(const std::string& s, const std::vector<CodePoint>& cps, size_t first,
                   size_t last) {  // code points [first, last)
  if (first >= last) return "";
  return s.substr(cps[first].begin, cps[last - 1].end - cps[first].begin);
}

// split() with sep=None: runs of whitespace separate, leading and trailing
// whitespace yields no empty parts; after maxsplit splits the rest, minus
// the whitespace run at its split side only, is the last part (CPython:
// "a b c ".split(None, 1) == ['a', 'b c ']).
std::vector<std::string> split_whitespace(const std::string& s, int64_t maxsplit, bool from_right) {
  const std::vector<CodePoint> cps = decode(s);
  std::vector<std::string> parts;
  auto limit_reached = [&] {
    return maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit;
  };
  if (!from_right) {
    size_t pos = 0;
    while (true) {
      while (pos < cps.size() && is_space(cps[pos])) ++pos;
      if (pos >= cps.size()) break;
      if (limit_reached()) {  // the rest keeps its trailing whitespace
        parts.push_back(substr(s, cps, pos, cps.size()));
        break;
      }
      size_t end = pos;
      while (end < cps.size() && !is_space(cps[end])) ++end;
      parts.push_back(substr(s, cps, pos, end));
      pos = end;
    }
    return parts;
  }
  size_t end = cps.size();
  while (true) {
    while (end > 0 && is_space(cps[end - 1])) --end;
    if (end == 0) break;
    if (limit_reached()) {  // the rest keeps its leading whitespace
      parts.push_back(substr(s, cps, 0, end));
      break;
    }
    size_t begin = end;
    while (begin > 0 && !is_space(cps[begin - 1])) --begin;
    parts.push_back(substr(s, cps, begin, end));
    end = begin;
  }
  std::reverse(parts.begin(), parts.end());
  return parts;
}

}  // namespace

bool python_isspace(int32_t cp) {
  switch (u_charDirection(cp)) {
    case U_WHITE_SPACE_NEUTRAL:
    case U_BLOCK_SEPARATOR:
    case U_SEGMENT_SEPARATOR:
      return true;
    default:
      return u_charType(cp) == U_SPACE_SEPARATOR;
  }
}

std::vector<std::string> python_split(const std::string& s, const std::optional<std::string>& sep,
                                      int64_t maxsplit, bool from_right) {
  if (!sep) return split_whitespace(s, maxsplit, from_right);
  if (sep->empty()) fail(0, "split: empty separator");
  // Byte search is code-point search: in valid UTF-8 a character's bytes
  // never match inside another character.
  std::vector<std::string> parts;
  auto limit_reached = [&] {
    return maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit;
  };
  if (!from_right) {
    size_t pos = 0;
    while (true) {
      const size_t hit = limit_reached() ? std::string::npos : s.find(*sep, pos);
      if (hit == std::string::npos) {
        parts.push_back(s.substr(pos));
        return parts;
      }
      parts.push_back(s.substr(pos, hit - pos));
      pos = hit + sep->size();
    }
  }
  size_t end = s.size();
  while (true) {
    const size_t hit =
        limit_reached() || end < sep->size() ? std::string::npos : s.rfind(*sep, end - sep->size());
    if (hit == std::string::npos) {
      parts.push_back(s.substr(0, end));
      break;
    }
    parts.push_back(s.substr(hit + sep->size(), end - hit - sep->size()));
    end = hit;
  }
  std::reverse(parts.begin(), parts.end());
  return parts;
}

std::string python_strip(const std::string& s, const std::optional<std::string>& chars, bool left,
                         bool right) {
  const std::vector<CodePoint> cps = decode(s);
  std::vector<std::string_view> strip_set;
  if (chars) {
    for (const CodePoint& c : decode(*chars)) strip_set.push_back(bytes_of(*chars, c));
  }
  auto strip = [&](const CodePoint& c) {
    if (!chars) return is_space(c);
    return std::find(strip_set.begin(), strip_set.end(), bytes_of(s, c)) != strip_set.end();
  };
  size_t begin = 0, end = cps.size();
  if (left) {
    while (begin < end && strip(cps[begin])) ++begin;
  }
  if (right) {
    while (end > begin && strip(cps[end - 1])) --end;
  }
  return substr(s, cps, begin, end);
}

std::string python_upper(const std::string& s) {
  std::string out;
  for (const CodePoint& c : decode(s)) append_mapped(out, s, c, Case::Upper);
  return out;
}

std::string python_lower(const std::string& s) {
  const std::vector<CodePoint> cps = decode(s);
  std::string out;
  for (size_t i = 0; i < cps.size(); ++i) append_lower_at(out, s, cps, i);
  return out;
}

// A character is titlecased when the one before it is not cased, and
// lowercased otherwise ("they're" -> "They'Re", as in Python).
std::string python_title(const std::string& s) {
  const std::vector<CodePoint> cps = decode(s);
  std::string out;
  bool previous_cased = false;
  for (size_t i = 0; i < cps.size(); ++i) {
    if (previous_cased) {
      append_lower_at(out, s, cps, i);
    } else {
      append_mapped(out, s, cps[i], Case::Title);
    }
    previous_cased = cased(cps[i].cp);
  }
  return out;
}

// Python 3.8+: the first character titlecased ('ǆ' -> 'ǅ'), the rest lowered.
std::string python_capitalize(const std::string& s) {
  const std::vector<CodePoint> cps = decode(s);
  std::string out;
  for (size_t i = 0; i < cps.size(); ++i) {
    if (i == 0) {
      append_mapped(out, s, cps[i], Case::Title);
    } else {
      append_lower_at(out, s, cps, i);
    }
  }
  return out;
}

std::string jinja_title(const std::string& s) {
  const std::vector<CodePoint> cps = decode(s);
  auto separator = [&](const CodePoint& c) {
    return is_space(c) ||
           (c.cp >= 0 && c.cp < 0x80 &&
            std::string_view("-({[<").find(static_cast<char>(c.cp)) != std::string_view::npos);
  };
  std::string out;
  for (size_t begin = 0; begin < cps.size();) {
    // One item of jinja2's re.split(r"([-\s({\[<]+)"): a maximal run of
    // separators or of other characters.
    const bool sep = separator(cps[begin]);
    size_t end = begin + 1;
    while (end < cps.size() && separator(cps[end]) == sep) ++end;
    append_mapped(out, s, cps[begin], Case::Upper);
    out += python_lower(substr(s, cps, begin + 1, end));
    begin = end;
  }
  return out;
}

bool python_islower(const std::string& s) {
  bool any_cased = false;
  for (const CodePoint& c : decode(s)) {
    if (is_upper(c.cp) || is_title(c.cp)) return false;
    any_cased |= is_lower(c.cp);
  }
  return any_cased;
}

bool python_isupper(const std::string& s) {
  bool any_cased = false;
  for (const CodePoint& c : decode(s)) {
    if (is_lower(c.cp) || is_title(c.cp)) return false;
    any_cased |= is_upper(c.cp);
  }
  return any_cased;
}

bool python_isspace(const std::string& s) {
  return all_of_nonempty(s, [](int32_t cp) { return cp >= 0 && python_isspace(cp); });
}
bool python_isalpha(const std::string& s) { return all_of_nonempty(s, is_alpha); }
bool python_isdigit(const std::string& s) { return all_of_nonempty(s, is_digit); }
bool python_isalnum(const std::string& s) { return all_of_nonempty(s, is_alnum); }

int64_t jinja_wordcount(const std::string& s) {
  int64_t words = 0;
  bool in_word = false;
  for (const CodePoint& c : decode(s)) {
    const bool word = c.cp == '_' || is_alnum(c.cp);
    words += word && !in_word;
    in_word = word;
  }
  return words;
}

}  // namespace pagoda::jinja
