// Python's str semantics on UTF-8 text, for the filters and methods that
// jinja2 maps onto Python's str (trim/strip, split(), upper/lower, title,
// capitalize, isspace/islower/...). Chat templates rendered by transformers
// run on CPython, so a template that trims message content must treat
// exactly Python's whitespace as whitespace (str.isspace: U+00A0, U+2000-
// U+200A, U+2028, U+3000, U+0085, U+001C-U+001F, ...), and case mapping is
// Unicode's full mapping ('ß'.upper() == 'SS'). Unicode properties come
// from ICU. Work is per code point; bytes that are not valid UTF-8 count as
// one uncased, non-space character each and are copied unchanged.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pagoda::jinja {

// str.isspace() of one code point: bidirectional class WS, B or S, or
// general category Zs (CPython's _PyUnicode_IsWhitespace).
bool python_isspace(int32_t cp);

// str.split with sep=None (runs of whitespace) or a separator; at most
// maxsplit splits (-1: no limit), counted from the right when from_right.
std::vector<std::string> python_split(const std::string& s, const std::optional<std::string>& sep,
                                      int64_t maxsplit, bool from_right);
// str.strip/lstrip/rstrip: chars = nullopt strips whitespace, else every
// code point in chars.
std::string python_strip(const std::string& s, const std::optional<std::string>& chars, bool left,
                         bool right);

// str.upper(), str.lower() (with the final-sigma rule), str.title(),
// str.capitalize(): full case mappings.
std::string python_upper(const std::string& s);
std::string python_lower(const std::string& s);
std::string python_title(const std::string& s);
std::string python_capitalize(const std::string& s);
// Jinja's |title filter, which is not str.title(): words begin after runs
// of whitespace, '-', '(', '{', '[' or '<', and each is w[0].upper() +
// w[1:].lower().
std::string jinja_title(const std::string& s);

// str.islower() / str.isupper(): some cased character, and none of the
// other case (nor titlecase).
bool python_islower(const std::string& s);
bool python_isupper(const std::string& s);
// str.isspace(), isalpha(), isdigit(), isalnum(): non-empty and every code
// point qualifies.
bool python_isspace(const std::string& s);
bool python_isalpha(const std::string& s);
bool python_isdigit(const std::string& s);
bool python_isalnum(const std::string& s);
// Jinja's |wordcount: the number of runs of word characters (Python's
// regex \w: str.isalnum() or '_').
int64_t jinja_wordcount(const std::string& s);

}  // namespace pagoda::jinja
