// A regular expression (the common subset of ECMAScript / Python syntax
// that JSON Schema patterns and vLLM's guided_regex use) as a grammar
// expression matching exactly the strings the regex matches in full.
//
// Supported: literals and escapes (\n \t \r \f \v \0 \xHH \uHHHH, escaped
// metacharacters), classes [a-z] [^...] with \d \w \s \D \W \S inside and
// outside them, `.` (any character but newline), groups ( ) (?: ) (?P<n> )
// (?<n> ), alternation |, quantifiers * + ? {m} {m,} {m,n} (lazy forms
// match the same strings), ^ at the start and $ at the end (ignored: the
// match is always whole). Refused with an InputError naming the construct:
// backreferences, lookaround, \b \B, anchors elsewhere, flags.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>
#include <cstdint>

namespace pagoda::structured {

// json_string: the expression goes inside a JSON string literal, so it may
// only produce characters JSON writes unescaped (no '"', '\\' or control
// characters: classes and `.` lose them, a literal one is an error).
std::string regex_to_gbnf_expression(std::string_view regex, bool json_string);
// A whole grammar (root ::= the expression).
std::string regex_to_gbnf(std::string_view regex);

// GBNF spellings shared by the generators: a literal "..." and a class.
std::string gbnf_literal(std::string_view bytes);
std::string gbnf_class(const std::vector<std::pair<uint32_t, uint32_t>>& ranges);

}  // namespace pagoda::structured
