// What a request constrains its output to: the forms of OpenAI's
// response_format and vLLM's structured_outputs / guided_*.
#pragma once

#include <string>

namespace pagoda::structured {

struct OutputSpec {
  enum class Kind { None, JsonSchema, JsonObject, Regex, Choice, Grammar };
  OutputSpec() = default;
  OutputSpec(Kind k, std::string v) : kind(k), value(std::move(v)) {}

  Kind kind = Kind::None;
  // JsonSchema: the schema as JSON text; Regex: the pattern; Choice: a JSON
  // array of strings; Grammar: GBNF text (gbnf_parser.h); else empty.
  std::string value;
  // Text the output starts with before the constrained part (a closed
  // think block for a reasoning model); "" for none.
  std::string prefix;

  bool empty() const { return kind == Kind::None; }
  const char* kind_name() const;
  // The spec as a grammar in text form. Throws InputError naming the problem.
  std::string to_gbnf() const;
};

}  // namespace pagoda::structured
