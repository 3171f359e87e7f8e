// Jinja2 filters (x | name(args)) and tests (x is name(args)), with the
// semantics of Jinja2 3.1 and transformers' tojson override.
#include <algorithm>
#include <cmath>
#include <set>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/pystr.h"
#include "tokenizer/jinja/support.h"

namespace pagoda::jinja {

namespace {

// Items a filter iterates over: list items, dict keys, string characters.
Json iterable_items(const Value& v, int line, const std::string& filter) {
  if (is_list(v)) return v.data;
  if (is_dict(v)) {
    Json keys = Json::array();
    for (const auto& [k, _] : v.data.items()) keys.push_back(k);
    return keys;
  }
  if (is_string(v)) {
    Json chars = Json::array();
    for (const std::string& c : utf8_chars(v.data.get<std::string>())) chars.push_back(c);
    return chars;
  }
  fail(line, "filter " + filter + " needs a list, dict or string, got " +
                 (v.undefined() ? std::string("undefined") : to_str(v)));
}

// item.attribute, where attribute may be dotted ("function.name").
Value attribute_of(const Json& item, const std::string& attribute) {
  Value v(item);
  for (const std::string& part : python_split(attribute, std::string("."), -1, false)) {
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    v = digits ? get_item(v, Value(Json(std::stoll(part)))) : get_item(v, Value(Json(part)));
  }
  return v;
}

// Sort key comparison for sort/unique/min/max: strings case-insensitive
// (compared by str.lower()) unless case_sensitive, as Jinja's filters do by
// default.
bool less_than(const Json& a, const Json& b, bool case_sensitive, int line) {
  if (a.is_string() && b.is_string() && !case_sensitive) {
    return python_lower(a.get<std::string>()) < python_lower(b.get<std::string>());
  }
  if (a.is_number() && b.is_number()) return a.get<double>() < b.get<double>();
  if (a.is_string() && b.is_string()) return a.get<std::string>() < b.get<std::string>();
  fail(line, "cannot compare " + repr(a) + " and " + repr(b));
}

std::string indent_text(const std::string& s, const std::string& pad, bool first, bool blank) {
  std::vector<std::string> lines = python_split(s, std::string("\n"), -1, false);
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i) out += '\n';
    const bool skip =
        (i == 0 && !first) || (!blank && python_strip(lines[i], std::nullopt, true, true).empty());
    if (!skip) out += pad;
    out += lines[i];
  }
  return out;
}

// printf-style "%s %d" % args, the subset templates use (s, d, i, f, r, %).
std::string percent_format(const std::string& f, const Args& args, int line) {
  std::string out;
  size_t next = 1;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] != '%') {
      out += f[i];
      continue;
    }
    if (++i >= f.size()) fail(line, "format: incomplete format");
    if (f[i] == '%') {
      out += '%';
      continue;
    }
    if (next >= args.size()) fail(line, "format: not enough arguments");
    const Value& a = args[next++];
    switch (f[i]) {
      case 's':
        out += to_str(a);
        break;
      case 'r':
        out += repr(as_json(a));
        break;
      case 'd':
      case 'i':
        out += std::to_string(static_cast<int64_t>(double_of(a, line, "format %d")));
        break;
      case 'f':
        out += fmt::format("{:.6f}", double_of(a, line, "format %f"));
        break;
      default:
        fail(line, std::string("format: unsupported conversion %") + f[i]);
    }
  }
  return out;
}

Json filter_by_test(const Json& items, Args& args, size_t test_pos, bool attr, bool keep,
                    int line) {
  Json out = Json::array();
  for (const Json& item : items) {
    Value subject = attr ? attribute_of(item, str_of(args[1], line, "selectattr")) : Value(item);
    bool passed;
    if (args.size() <= test_pos) {
      passed = truthy(subject);
    } else {
      Args test_args{subject};
      for (size_t k = test_pos + 1; k < args.size(); ++k) test_args.push_back(args[k]);
      passed = apply_test(str_of(args[test_pos], line, "test name"), test_args, line);
    }
    if (passed == keep) out.push_back(item);
  }
  return out;
}

}  // namespace

Value apply_filter(const std::string& name, Args& args, Kwargs& kwargs, int line) {
  const Value& x = args[0];
  auto opt = [&](size_t pos, const char* key) { return arg(args, kwargs, pos, key); };
  if (name == "length" || name == "count") {
    if (is_string(x))
      return Value(Json(static_cast<int64_t>(utf8_chars(x.data.get<std::string>()).size())));
    if (is_list(x) || is_dict(x)) return Value(Json(static_cast<int64_t>(x.data.size())));
    if (x.kind == Value::Kind::Namespace) return Value(Json(static_cast<int64_t>(x.ns->size())));
    fail(line, "length of " + (x.undefined() ? std::string("an undefined value") : to_str(x)));
  }
  if (name == "tojson") {
    // transformers' tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
    const auto indent = opt(2, "indent");
    const auto sort_keys = opt(4, "sort_keys");
    Json j = as_json(x);
    if (sort_keys && truthy(*sort_keys))
      j = Json::parse(nlohmann::json(j).dump());  // std::map orders keys
    return Value(Json(to_json(j, indent && !(indent->is_data() && indent->data.is_null())
                                     ? static_cast<int>(int_of(*indent, line, "tojson indent"))
                                     : -1)));
  }
  if (name == "string") return Value(Json(to_str(x)));
  if (name == "safe" || name == "e" || name == "escape") {
    if (name == "safe") return x;
    std::string out;  // HTML escaping, as Jinja's escape filter
    for (char c : to_str(x)) {
      switch (c) {
        case '&':
          out += "&amp;";
          break;
        case '<':
          out += "&lt;";
          break;
        case '>':
          out += "&gt;";
          break;
        case '"':
          out += "&#34;";
          break;
        case '\'':
          out += "&#39;";
          break;
        default:
          out += c;
      }
    }
    return Value(Json(out));
  }
  if (name == "trim") {
    const auto chars = opt(1, "chars");
    return Value(Json(
        python_strip(to_str(x), chars ? std::optional(str_of(*chars, line, "trim")) : std::nullopt,
                     true, true)));
  }
  if (name == "upper" || name == "lower" || name == "capitalize") {
    Value method = string_method(to_str(x), name);
    Args none;
    Kwargs no_kw;
    return (*method.call)(none, no_kw);
  }
  if (name == "title") return Value(Json(jinja_title(to_str(x))));
  if (name == "default" || name == "d") {
    const auto boolean = opt(2, "boolean");
    const bool use_default = x.undefined() || (boolean && truthy(*boolean) && !truthy(x));
    if (!use_default) return x;
    return opt(1, "default_value").value_or(Value(Json("")));
  }
  if (name == "join") {
    const auto sep = opt(1, "d");
    const auto attribute = opt(2, "attribute");
    std::string out;
    bool first = true;
    for (const Json& item : iterable_items(x, line, name)) {
      if (!first) out += sep ? to_str(*sep) : "";
      first = false;
      out += to_str(attribute ? attribute_of(item, to_str(*attribute)) : Value(item));
    }
    return Value(Json(out));
  }
  if (name == "first" || name == "last") {
    Json items = iterable_items(x, line, name);
    if (items.empty()) return Value();
    return Value(name == "first" ? items.front() : items.back());
  }
  if (name == "list") return Value(iterable_items(x, line, name));
  if (name == "reverse") {
    if (is_string(x)) {
      std::vector<std::string> chars = utf8_chars(x.data.get<std::string>());
      std::string out;
      for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += *it;
      return Value(Json(out));
    }
    Json items = iterable_items(x, line, name);
    std::reverse(items.begin(), items.end());
    return Value(std::move(items));
  }
  if (name == "int" || name == "float") {
    const Value dflt = opt(1, "default").value_or(Value(name == "int" ? Json(0) : Json(0.0)));
    double d;
    if (is_number(x) || (x.is_data() && x.data.is_boolean())) {
      d = double_of(x, line, name.c_str());
    } else if (is_string(x)) {
      try {
        size_t used = 0;
        const std::string s = python_strip(x.data.get<std::string>(), std::nullopt, true, true);
        d = std::stod(s, &used);
        if (used != s.size()) return dflt;
      } catch (const std::exception&) {
        return dflt;
      }
    } else {
      return dflt;
    }
    if (name == "int") return Value(Json(static_cast<int64_t>(std::trunc(d))));
    return Value(Json(d));
  }
  if (name == "abs") {
    if (is_int(x)) return Value(Json(std::llabs(x.data.get<int64_t>())));
    return Value(Json(std::fabs(double_of(x, line, "abs"))));
  }
  if (name == "round") {
    const auto precision = opt(1, "precision");
    const std::string method = to_str(opt(2, "method").value_or(Value(Json("common"))));
    const double scale = std::pow(10.0, precision ? int_of(*precision, line, "round") : 0);
    const double v = double_of(x, line, "round") * scale;
    const double r = method == "ceil"    ? std::ceil(v)
                     : method == "floor" ? std::floor(v)
                                         : std::round(v);
    return Value(Json(r / scale));
  }
  if (name == "replace") {
    const auto count = opt(3, "count");
    return Value(
        Json(replace_all(to_str(x), str_of(opt(1, "old").value_or(Value()), line, "replace"),
                         str_of(opt(2, "new").value_or(Value()), line, "replace"),
                         count ? int_of(*count, line, "replace count") : -1)));
  }
  if (name == "format") return Value(Json(percent_format(str_of(x, line, "format"), args, line)));
  if (name == "indent") {
    const auto width = opt(1, "width");
    const auto first = opt(2, "first");
    const auto blank = opt(3, "blank");
    const std::string pad = width && is_string(*width)
                                ? width->data.get<std::string>()
                                : std::string(width ? int_of(*width, line, "indent") : 4, ' ');
    return Value(
        Json(indent_text(to_str(x), pad, first && truthy(*first), blank && truthy(*blank))));
  }
  if (name == "items") {
    if (x.undefined()) return Value(Json::array());
    if (!is_dict(x)) fail(line, "items filter needs a dict, got " + to_str(x));
    Json out = Json::array();
    for (const auto& [k, v] : x.data.items()) out.push_back(Json::array({k, v}));
    return Value(std::move(out));
  }
  if (name == "dictsort") {
    if (!is_dict(x)) fail(line, "dictsort needs a dict");
    Json out = Json::array();
    for (const auto& [k, v] : x.data.items()) out.push_back(Json::array({k, v}));
    std::stable_sort(out.begin(), out.end(), [&](const Json& a, const Json& b) {
      return less_than(a[0], b[0], false, line);
    });
    return Value(std::move(out));
  }
  if (name == "selectattr" || name == "rejectattr") {
    if (args.size() < 2) fail(line, name + " needs an attribute name");
    return Value(
        filter_by_test(iterable_items(x, line, name), args, 2, true, name == "selectattr", line));
  }
  if (name == "select" || name == "reject") {
    return Value(
        filter_by_test(iterable_items(x, line, name), args, 1, false, name == "select", line));
  }
  if (name == "map") {
    Json out = Json::array();
    const auto attribute = opt(999, "attribute");
    for (const Json& item : iterable_items(x, line, name)) {
      if (attribute) {
        Value v = attribute_of(item, to_str(*attribute));
        if (v.undefined()) v = opt(999, "default").value_or(Value());
        out.push_back(as_json(v));
      } else {
        if (args.size() < 2) fail(line, "map needs a filter name or attribute=");
        Args filter_args{Value(item)};
        for (size_t k = 2; k < args.size(); ++k) filter_args.push_back(args[k]);
        Kwargs none;
        out.push_back(as_json(apply_filter(str_of(args[1], line, "map"), filter_args, none, line)));
      }
    }
    return Value(std::move(out));
  }
  if (name == "unique" || name == "sort" || name == "min" || name == "max" || name == "sum") {
    const auto case_sensitive = opt(name == "sort" ? 2 : 1, "case_sensitive");
    const bool cs = case_sensitive && truthy(*case_sensitive);
    const auto attribute = opt(name == "sort" ? 3 : 2, "attribute");
    Json items = iterable_items(x, line, name);
    auto key = [&](const Json& item) {
      return attribute ? as_json(attribute_of(item, to_str(*attribute))) : item;
    };
    if (name == "sum") {
      Value total = opt(999, "start").value_or(Value(Json(0)));
      for (const Json& item : items) total = binary_op("+", total, Value(key(item)), line);
      return total;
    }
    if (name == "unique") {
      Json out = Json::array();
      std::set<std::string> seen;
      for (const Json& item : items) {
        const Json k = key(item);
        if (seen.insert(k.is_string() && !cs ? python_lower(k.get<std::string>()) : k.dump())
                .second)
          out.push_back(item);
      }
      return Value(std::move(out));
    }
    if (items.empty()) return name == "sort" ? Value(std::move(items)) : Value();
    auto less = [&](const Json& a, const Json& b) { return less_than(key(a), key(b), cs, line); };
    if (name == "min") return Value(*std::min_element(items.begin(), items.end(), less));
    if (name == "max") return Value(*std::max_element(items.begin(), items.end(), less));
    std::stable_sort(items.begin(), items.end(), less);
    const auto reverse = opt(1, "reverse");
    if (reverse && truthy(*reverse)) std::reverse(items.begin(), items.end());
    return Value(std::move(items));
  }
  if (name == "wordcount") {
    return Value(Json(jinja_wordcount(to_str(x))));
  }
  if (name == "attr") return get_attr(x, str_of(opt(1, "name").value_or(Value()), line, "attr"));
  fail(line, "unknown filter '" + name + "'");
}

bool apply_test(const std::string& name, const Args& args, int line) {
  const Value& x = args[0];
  auto other = [&]() -> const Value& {
    if (args.size() < 2) fail(line, "test '" + name + "' needs an argument");
    return args[1];
  };
  const bool is_bool = x.is_data() && x.data.is_boolean();
  if (name == "defined") return !x.undefined();
  if (name == "undefined") return x.undefined();
  if (name == "none") return x.is_data() && x.data.is_null();
  if (name == "string") return is_string(x);
  if (name == "number") return is_number(x) || is_bool;
  if (name == "integer") return is_int(x);
  if (name == "float") return x.is_data() && x.data.is_number_float();
  if (name == "boolean") return is_bool;
  if (name == "true") return is_bool && x.data.get<bool>();
  if (name == "false") return is_bool && !x.data.get<bool>();
  if (name == "mapping") return is_dict(x) || x.kind == Value::Kind::Namespace;
  if (name == "iterable") return is_list(x) || is_dict(x) || is_string(x);
  if (name == "sequence") return is_list(x) || is_dict(x) || is_string(x);
  if (name == "callable") return x.kind == Value::Kind::Callable;
  if (name == "equalto" || name == "eq" || name == "==")
    return truthy(binary_op("==", x, other(), line));
  if (name == "ne" || name == "!=") return truthy(binary_op("!=", x, other(), line));
  if (name == "lt" || name == "lessthan" || name == "<")
    return truthy(binary_op("<", x, other(), line));
  if (name == "le" || name == "<=") return truthy(binary_op("<=", x, other(), line));
  if (name == "gt" || name == "greaterthan" || name == ">")
    return truthy(binary_op(">", x, other(), line));
  if (name == "ge" || name == ">=") return truthy(binary_op(">=", x, other(), line));
  if (name == "in") return truthy(binary_op("in", x, other(), line));
  if (name == "odd" || name == "even") {
    const int64_t v = int_of(x, line, name.c_str());
    return (v % 2 != 0) == (name == "odd");
  }
  if (name == "divisibleby") {
    const int64_t d = int_of(other(), line, "divisibleby");
    if (d == 0) fail(line, "divisibleby zero");
    return int_of(x, line, "divisibleby") % d == 0;
  }
  if (name == "lower" || name == "upper") {  // jinja2: str(value).islower() / isupper()
    if (!is_string(x)) return false;
    const std::string& s = x.data.get_ref<const std::string&>();
    return name == "lower" ? python_islower(s) : python_isupper(s);
  }
  fail(line, "unknown test '" + name + "'");
}

}  // namespace pagoda::jinja
