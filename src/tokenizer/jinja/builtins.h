// The operators, filters, tests, attribute methods and global functions of
// the Jinja interpreter, with Python/Jinja2 semantics where chat templates
// depend on them (code-point strings, Python slicing, json.dumps output).
#pragma once

#include <string>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace pagoda::jinja {

// range, namespace, dict, raise_exception, strftime_now; Undefined otherwise.
Value builtin_global(const std::string& name);

// The UTF-8 characters (code points) of s, each as its own string.
std::vector<std::string> utf8_chars(const std::string& s);

// The JSON form of a value (namespaces become objects, undefined null).
Json as_json(const Value& v);

// x.name: dict key, namespace attribute, or a bound str/dict method.
Value get_attr(const Value& x, const std::string& name);
// x[key]: list/str index (negative from the end), dict key.
Value get_item(const Value& x, const Value& key);
// x[start:stop:step] with Python semantics on lists and strings.
Value slice(const Value& x, const Value& start, const Value& stop, const Value& step, int line);

// Arithmetic, comparison, ~ and (not) in.
Value binary_op(const std::string& op, const Value& a, const Value& b, int line);

// args[0] is the filtered value.
Value apply_filter(const std::string& name, Args& args, Kwargs& kwargs, int line);
// args[0] is the tested value.
bool apply_test(const std::string& name, const Args& args, int line);

}  // namespace pagoda::jinja
