// Runs a parsed template against a context of variables.
#pragma once

#include <map>
#include <string>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/value.h"

namespace pagoda::jinja {

// Renders `t` with the given top-level variables. Throws InputError for
// runtime errors (raise_exception, bad operands, recursion too deep).
std::string render(const Template& t, const std::map<std::string, Value>& variables);

}  // namespace pagoda::jinja
