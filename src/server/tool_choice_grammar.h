// tool_choice "required" and a named function, enforced: a grammar of the
// configured tool-call format (hermes, deepseek_v3, deepseek_v31) whose
// calls name one of the request's tools (or the named one) with arguments
// that follow that tool's parameters schema (json_schema_to_grammar.h), so
// even a model that knows nothing of tools writes a call the format's
// parser turns into tool_calls. "required" allows up to four calls in a
// row; a named function exactly one. A marker that the vocabulary has as
// one token (DeepSeek's <｜tool▁calls▁begin｜> ..., Qwen3's <tool_call>;
// special or not) is a token terminal: the model writes the token it was
// trained on, never the same text spelled in pieces, and a special marker
// (no bytes to match) is admitted at all.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "server/tool_call_parser.h"
#include "structured/token_vocab.h"

namespace pagoda::server {

// `tools`: the request's OpenAI tools array; `only`: the named function,
// or "" for any; `vocab`: the model's (null: markers as text). Throws
// ApiError (400) naming the problem (an unknown function, a parameters
// schema the grammar cannot express).
std::string tool_choice_gbnf(const ToolCallFormat& format, const nlohmann::ordered_json& tools,
                             const std::string& only, const structured::TokenVocab* vocab);

}  // namespace pagoda::server
