// The grammar text form, llama.cpp's GBNF:
//
//   root   ::= object            # rules: name ::= alternatives; root is the start
//   object ::= "{" pair ("," pair)* "}"
//   pair   ::= string ":" [0-9]+ | "null"
//
// Literals "..." and character classes [a-z0-9_] / [^"\\] with the escapes
// \n \r \t \\ \" \] \- \^ \xHH \uHHHH \UHHHHHHHH; `.` any character; groups
// ( ... ); quantifiers * + ? {m} {m,} {m,n}; `|` alternation; `#` comments.
// A rule may span lines. Classes match Unicode code points as UTF-8.
#pragma once

#include <string_view>

#include "structured/grammar.h"

namespace pagoda::structured {

// Throws InputError naming the line, column and problem; the grammar is
// validated (Grammar::validate).
Grammar parse_gbnf(std::string_view text);

}  // namespace pagoda::structured
