// Small helpers shared by the interpreter's builtins: errors, argument
// access by position or keyword, and type checks.
#pragma once

#include <optional>
#include <string>

#include "core/error.h"
#include "tokenizer/jinja/value.h"

namespace pagoda::jinja {

[[noreturn]] inline void fail(int line, const std::string& why) {
  throw InputError((line > 0 ? "line " + std::to_string(line) + ": " : std::string()) + why);
}

// Argument `name` given by keyword, else at position `pos` of args; nullopt
// when absent (an explicit undefined also counts as absent).
inline std::optional<Value> arg(const Args& args, const Kwargs& kwargs, size_t pos,
                                const std::string& name) {
  for (const auto& [k, v] : kwargs) {
    if (k == name) return v;
  }
  if (pos < args.size() && !args[pos].undefined()) return args[pos];
  return std::nullopt;
}

inline bool is_string(const Value& v) { return v.is_data() && v.data.is_string(); }
inline bool is_int(const Value& v) { return v.is_data() && v.data.is_number_integer(); }
inline bool is_number(const Value& v) { return v.is_data() && v.data.is_number(); }
inline bool is_list(const Value& v) { return v.is_data() && v.data.is_array(); }
inline bool is_dict(const Value& v) { return v.is_data() && v.data.is_object(); }

inline const std::string& str_of(const Value& v, int line, const char* what) {
  if (!is_string(v)) fail(line, std::string(what) + " needs a string, got " + to_str(v));
  return v.data.get_ref<const std::string&>();
}

inline int64_t int_of(const Value& v, int line, const char* what) {
  if (v.is_data() && v.data.is_boolean()) return v.data.get<bool>() ? 1 : 0;
  if (!is_int(v)) fail(line, std::string(what) + " needs an integer, got " + to_str(v));
  return v.data.get<int64_t>();
}

inline double double_of(const Value& v, int line, const char* what) {
  if (v.is_data() && v.data.is_boolean()) return v.data.get<bool>() ? 1 : 0;
  if (!is_number(v)) fail(line, std::string(what) + " needs a number, got " + to_str(v));
  return v.data.get<double>();
}

// Python's str.replace: at most count replacements (-1: all).
std::string replace_all(const std::string& s, const std::string& from, const std::string& to,
                        int64_t count);

// A bound method of a string or dict value (s.startswith, d.items, ...);
// Undefined when there is no such method.
Value string_method(const std::string& self, const std::string& name);
Value dict_method(const Json& self, const std::string& name);

}  // namespace pagoda::jinja
