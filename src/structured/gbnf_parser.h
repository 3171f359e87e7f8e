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
// Tokens (llama.cpp's syntax): <[ID]> is the vocabulary's token ID, and
// <TEXT> (angle brackets included, e.g. <|im_end|> or <｜tool▁sep｜>) the
// token whose text that is; either matches that one token id, never the
// same text spelled by other tokens, and is how a grammar admits special
// tokens (which have no bytes to match). A TEXT is looked up when the
// grammar is compiled against a vocabulary (CompiledGrammar).
#pragma once

#include <string_view>

#include "structured/grammar.h"

namespace pagoda::structured {

// Throws InputError naming the line, column and problem; the grammar is
// validated (Grammar::validate).
Grammar parse_gbnf(std::string_view text);

}  // namespace pagoda::structured
