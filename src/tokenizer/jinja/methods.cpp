// Python str and dict methods callable from templates
// (message.content.startswith('<tool_response>'), tool.items(), ...). Only
// the non-mutating ones: transformers renders in an immutable sandbox.
#include <algorithm>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/pystr.h"
#include "tokenizer/jinja/support.h"

namespace pagoda::jinja {

namespace {

// Strings a startswith/endswith argument stands for: one string or a tuple.
std::vector<std::string> affixes(const Value& v) {
  if (is_string(v)) return {v.data.get<std::string>()};
  std::vector<std::string> out;
  if (is_list(v)) {
    for (const Json& j : v.data) {
      if (!j.is_string()) fail(0, "startswith/endswith take a string or a tuple of strings");
      out.push_back(j.get<std::string>());
    }
    return out;
  }
  fail(0, "startswith/endswith take a string or a tuple of strings, got " + to_str(v));
}

std::optional<std::string> opt_string(const Args& a, const Kwargs& kw, size_t pos,
                                      const char* name) {
  auto v = arg(a, kw, pos, name);
  if (!v || (v->is_data() && v->data.is_null())) return std::nullopt;
  return str_of(*v, 0, name);
}

Value bound(Function f) { return Value::function(std::move(f)); }

}  // namespace

std::string replace_all(const std::string& s, const std::string& from, const std::string& to,
                        int64_t count) {
  std::string out;
  if (from.empty()) {  // Python inserts `to` around every character
    const std::vector<std::string> chars = utf8_chars(s);
    int64_t done = 0;
    for (const std::string& c : chars) {
      if (count < 0 || done < count) out += to, ++done;
      out += c;
    }
    if (count < 0 || done < count) out += to;
    return out;
  }
  size_t pos = 0;
  for (int64_t n = 0; count < 0 || n < count; ++n) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out += to;
    pos = hit + from.size();
  }
  out.append(s, pos, std::string::npos);
  return out;
}

Value string_method(const std::string& self, const std::string& name) {
  if (name == "startswith" || name == "endswith") {
    const bool starts = name == "startswith";
    return bound([self, starts](Args& a, Kwargs&) {
      if (a.empty()) fail(0, "startswith/endswith need an argument");
      for (const std::string& x : affixes(a[0])) {
        const bool hit = x.size() <= self.size() &&
                         (starts ? self.compare(0, x.size(), x) == 0
                                 : self.compare(self.size() - x.size(), x.size(), x) == 0);
        if (hit) return Value(Json(true));
      }
      return Value(Json(false));
    });
  }
  if (name == "split" || name == "rsplit") {
    const bool right = name == "rsplit";
    return bound([self, right](Args& a, Kwargs& kw) {
      const auto max = arg(a, kw, 1, "maxsplit");
      Json out = Json::array();
      for (std::string& p : python_split(self, opt_string(a, kw, 0, "sep"),
                                         max ? int_of(*max, 0, "maxsplit") : -1, right)) {
        out.push_back(std::move(p));
      }
      return Value(std::move(out));
    });
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const bool left = name != "rstrip", right = name != "lstrip";
    return bound([self, left, right](Args& a, Kwargs& kw) {
      return Value(Json(python_strip(self, opt_string(a, kw, 0, "chars"), left, right)));
    });
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    return bound([self, name](Args&, Kwargs&) {
      if (name == "upper") return Value(Json(python_upper(self)));
      if (name == "lower") return Value(Json(python_lower(self)));
      if (name == "title") return Value(Json(python_title(self)));
      return Value(Json(python_capitalize(self)));
    });
  }
  if (name == "replace") {
    return bound([self](Args& a, Kwargs& kw) {
      const std::string from = str_of(arg(a, kw, 0, "old").value_or(Value()), 0, "replace");
      const std::string to = str_of(arg(a, kw, 1, "new").value_or(Value()), 0, "replace");
      const auto count = arg(a, kw, 2, "count");
      return Value(Json(replace_all(self, from, to, count ? int_of(*count, 0, "count") : -1)));
    });
  }
  if (name == "find" || name == "rfind" || name == "count" || name == "index") {
    return bound([self, name](Args& a, Kwargs&) {
      if (a.empty()) fail(0, name + " needs an argument");
      const std::string& x = str_of(a[0], 0, "find");
      if (name == "count") {
        int64_t n = 0;
        if (x.empty()) return Value(Json(static_cast<int64_t>(utf8_chars(self).size()) + 1));
        for (size_t p = self.find(x); p != std::string::npos; p = self.find(x, p + x.size())) ++n;
        return Value(Json(n));
      }
      const size_t hit = name == "rfind" ? self.rfind(x) : self.find(x);
      if (hit == std::string::npos) {
        if (name == "index") fail(0, "substring not found");
        return Value(Json(-1));
      }
      // Python reports code-point offsets.
      return Value(Json(static_cast<int64_t>(utf8_chars(self.substr(0, hit)).size())));
    });
  }
  if (name == "isdigit" || name == "isalpha" || name == "isspace" || name == "isalnum" ||
      name == "isupper" || name == "islower") {
    return bound([self, name](Args&, Kwargs&) {
      if (name == "isdigit") return Value(Json(python_isdigit(self)));
      if (name == "isalpha") return Value(Json(python_isalpha(self)));
      if (name == "isalnum") return Value(Json(python_isalnum(self)));
      if (name == "isspace") return Value(Json(python_isspace(self)));
      return Value(Json(name == "isupper" ? python_isupper(self) : python_islower(self)));
    });
  }
  if (name == "join") {
    return bound([self](Args& a, Kwargs&) {
      if (a.empty() || !is_list(a[0])) fail(0, "str.join needs a list");
      std::string out;
      for (size_t i = 0; i < a[0].data.size(); ++i) {
        if (i) out += self;
        out += to_str(Value(a[0].data[i]));
      }
      return Value(Json(out));
    });
  }
  return Value();
}

Value dict_method(const Json& self, const std::string& name) {
  if (name == "items" || name == "keys" || name == "values") {
    return bound([self, name](Args&, Kwargs&) {
      Json out = Json::array();
      for (const auto& [k, v] : self.items()) {
        if (name == "items") out.push_back(Json::array({k, v}));
        if (name == "keys") out.push_back(k);
        if (name == "values") out.push_back(v);
      }
      return Value(std::move(out));
    });
  }
  if (name == "get") {
    return bound([self](Args& a, Kwargs&) {
      if (a.empty()) fail(0, "get needs a key");
      if (is_string(a[0])) {
        const auto it = self.find(a[0].data.get<std::string>());
        if (it != self.end()) return Value(*it);
      }
      return a.size() > 1 ? a[1] : Value(Json());
    });
  }
  return Value();
}

}  // namespace pagoda::jinja
