// Global functions, attribute/item access, slicing and binary operators.
#include "tokenizer/jinja/builtins.h"

#include <chrono>
#include <cmath>
#include <ctime>

#include "tokenizer/jinja/support.h"
#include "tokenizer/utf8.h"

namespace pagoda::jinja {

namespace {

Value make_namespace(Args& args, Kwargs& kwargs) {
  Value v;
  v.kind = Value::Kind::Namespace;
  v.ns = std::make_shared<Json>(Json::object());
  for (const Value& a : args) {  // namespace(some_dict) copies its items
    if (!is_dict(a)) fail(0, "namespace() takes a dict or keyword arguments");
    for (const auto& [k, x] : a.data.items()) (*v.ns)[k] = x;
  }
  for (const auto& [k, x] : kwargs) (*v.ns)[k] = as_json(x);
  return v;
}

Value range(Args& args, Kwargs&) {
  if (args.empty() || args.size() > 3) fail(0, "range() takes 1 to 3 integers");
  int64_t start = 0, stop, step = 1;
  if (args.size() == 1) {
    stop = int_of(args[0], 0, "range");
  } else {
    start = int_of(args[0], 0, "range");
    stop = int_of(args[1], 0, "range");
    if (args.size() == 3) step = int_of(args[2], 0, "range");
  }
  if (step == 0) fail(0, "range() step must not be zero");
  Json out = Json::array();
  constexpr int64_t kMaxItems = 1 << 20;  // a template must not exhaust memory
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (static_cast<int64_t>(out.size()) >= kMaxItems) fail(0, "range() is too long");
    out.push_back(i);
  }
  return Value(std::move(out));
}

Value strftime_now(Args& args, Kwargs&) {
  if (args.size() != 1) fail(0, "strftime_now() takes a format string");
  const std::string& format = str_of(args[0], 0, "strftime_now");
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm local{};
  localtime_r(&now, &local);
  char buf[256];
  const size_t n = std::strftime(buf, sizeof buf, format.c_str(), &local);
  return Value(Json(std::string(buf, n)));
}

// Python's index normalization for one subscript: negative counts from the
// end; nullopt when out of range.
std::optional<size_t> normalize_index(int64_t i, size_t size) {
  if (i < 0) i += static_cast<int64_t>(size);
  if (i < 0 || i >= static_cast<int64_t>(size)) return std::nullopt;
  return static_cast<size_t>(i);
}

// Python's slice.indices(): the items picked by start:stop:step.
std::vector<size_t> slice_indices(const Value& start, const Value& stop, const Value& step,
                                  size_t size, int line) {
  const auto n = static_cast<int64_t>(size);
  auto given = [](const Value& v) { return !v.undefined() && !(v.is_data() && v.data.is_null()); };
  const int64_t st = given(step) ? int_of(step, line, "slice step") : 1;
  if (st == 0) fail(line, "slice step cannot be zero");
  auto bound = [&](const Value& v, int64_t dflt) {
    if (!given(v)) return dflt;
    int64_t i = int_of(v, line, "slice index");
    if (i < 0) i += n;
    if (st > 0) return std::clamp<int64_t>(i, 0, n);
    return std::clamp<int64_t>(i, -1, n - 1);
  };
  const int64_t b = bound(start, st > 0 ? 0 : n - 1);
  const int64_t e = bound(stop, st > 0 ? n : -1);
  std::vector<size_t> out;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) out.push_back(static_cast<size_t>(i));
  return out;
}

bool both_ints(const Value& a, const Value& b) {
  auto intlike = [](const Value& v) {
    return v.is_data() && (v.data.is_number_integer() || v.data.is_boolean());
  };
  return intlike(a) && intlike(b);
}

bool numeric(const Value& v) { return v.is_data() && (v.data.is_number() || v.data.is_boolean()); }

int64_t floor_div(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

Value repeat(const Value& seq, int64_t times) {
  Json out = seq.data.is_string() ? Json("") : Json::array();
  for (int64_t i = 0; i < times; ++i) {
    if (seq.data.is_string()) {
      out.get_ref<std::string&>() += seq.data.get_ref<const std::string&>();
    } else {
      for (const Json& x : seq.data) out.push_back(x);
    }
  }
  return Value(std::move(out));
}

bool equal(const Value& a, const Value& b) {
  if (a.undefined() || b.undefined()) return a.undefined() && b.undefined();
  if (!a.is_data() || !b.is_data()) return false;
  if (numeric(a) && numeric(b)) return double_of(a, 0, "==") == double_of(b, 0, "==");
  return a.data == b.data;
}

bool contains(const Value& container, const Value& item, int line) {
  if (is_string(container)) {
    return container.data.get_ref<const std::string&>().find(
               str_of(item, line, "'in' on a string")) != std::string::npos;
  }
  if (is_list(container)) {
    for (const Json& x : container.data) {
      if (equal(Value(x), item)) return true;
    }
    return false;
  }
  if (is_dict(container))
    return is_string(item) && container.data.contains(item.data.get<std::string>());
  if (container.kind == Value::Kind::Namespace) {
    return is_string(item) && container.ns->contains(item.data.get<std::string>());
  }
  if (container.undefined() || (container.is_data() && container.data.is_null())) {
    fail(line, "'in' on an undefined value");
  }
  fail(line, "'in' needs a string, list or dict, got " + to_str(container));
}

int compare(const Value& a, const Value& b, const std::string& op, int line) {
  if (numeric(a) && numeric(b)) {
    const double x = double_of(a, line, op.c_str()), y = double_of(b, line, op.c_str());
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (is_string(a) && is_string(b)) {
    // UTF-8 byte order is code-point order, as Python compares str.
    const int c =
        a.data.get_ref<const std::string&>().compare(b.data.get_ref<const std::string&>());
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  fail(line, "cannot compare " + to_str(a) + " " + op + " " + to_str(b));
}

}  // namespace

std::vector<std::string> utf8_chars(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const size_t n =
        std::min<size_t>(utf8::sequence_length(static_cast<unsigned char>(s[i])), s.size() - i);
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

Value builtin_global(const std::string& name) {
  if (name == "range") return Value::function(range);
  if (name == "namespace") return Value::function(make_namespace);
  if (name == "dict") {
    return Value::function([](Args& args, Kwargs& kwargs) {
      Json out = Json::object();
      for (const Value& a : args) {
        if (!is_dict(a)) fail(0, "dict() takes a dict or keyword arguments");
        for (const auto& [k, x] : a.data.items()) out[k] = x;
      }
      for (const auto& [k, x] : kwargs) out[k] = as_json(x);
      return Value(std::move(out));
    });
  }
  if (name == "raise_exception") {
    return Value::function([](Args& args, Kwargs&) -> Value {
      throw InputError("chat template error: " +
                       (args.empty() ? std::string("raised") : to_str(args[0])));
    });
  }
  if (name == "strftime_now") return Value::function(strftime_now);
  return Value();
}

Json as_json(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Data:
      return v.data;
    case Value::Kind::Namespace:
      return *v.ns;
    default:
      return Json();
  }
}

Value get_attr(const Value& x, const std::string& name) {
  if (x.kind == Value::Kind::Namespace) {
    const auto it = x.ns->find(name);
    return it == x.ns->end() ? Value() : Value(*it);
  }
  if (is_string(x)) return string_method(x.data.get<std::string>(), name);
  if (is_dict(x)) {
    // Python's getattr: a dict's own methods come before its keys.
    Value method = dict_method(x.data, name);
    if (!method.undefined()) return method;
    const auto it = x.data.find(name);
    return it == x.data.end() ? Value() : Value(*it);
  }
  return Value();
}

Value get_item(const Value& x, const Value& key) {
  if (is_list(x) && is_int(key)) {
    const auto i = normalize_index(key.data.get<int64_t>(), x.data.size());
    return i ? Value(x.data[*i]) : Value();
  }
  if (is_string(x) && is_int(key)) {
    const std::vector<std::string> chars = utf8_chars(x.data.get<std::string>());
    const auto i = normalize_index(key.data.get<int64_t>(), chars.size());
    return i ? Value(Json(chars[*i])) : Value();
  }
  if (is_dict(x) && is_string(key)) {
    const auto it = x.data.find(key.data.get<std::string>());
    if (it != x.data.end()) return Value(*it);
    return dict_method(x.data, key.data.get<std::string>());
  }
  if (is_string(key)) return get_attr(x, key.data.get<std::string>());
  return Value();
}

Value slice(const Value& x, const Value& start, const Value& stop, const Value& step, int line) {
  if (is_list(x)) {
    Json out = Json::array();
    for (size_t i : slice_indices(start, stop, step, x.data.size(), line)) out.push_back(x.data[i]);
    return Value(std::move(out));
  }
  if (is_string(x)) {
    const std::vector<std::string> chars = utf8_chars(x.data.get<std::string>());
    std::string out;
    for (size_t i : slice_indices(start, stop, step, chars.size(), line)) out += chars[i];
    return Value(Json(out));
  }
  fail(line, "cannot slice " + (x.undefined() ? std::string("an undefined value") : to_str(x)));
}

Value binary_op(const std::string& op, const Value& a, const Value& b, int line) {
  if (op == "~") return Value(Json(to_str(a) + to_str(b)));
  if (op == "==") return Value(Json(equal(a, b)));
  if (op == "!=") return Value(Json(!equal(a, b)));
  if (op == "in") return Value(Json(contains(b, a, line)));
  if (op == "not in") return Value(Json(!contains(b, a, line)));
  if (op == "<") return Value(Json(compare(a, b, op, line) < 0));
  if (op == ">") return Value(Json(compare(a, b, op, line) > 0));
  if (op == "<=") return Value(Json(compare(a, b, op, line) <= 0));
  if (op == ">=") return Value(Json(compare(a, b, op, line) >= 0));
  if (op == "+") {
    if (is_string(a) && is_string(b)) {
      return Value(Json(a.data.get<std::string>() + b.data.get<std::string>()));
    }
    if (is_list(a) && is_list(b)) {
      Json out = a.data;
      for (const Json& x : b.data) out.push_back(x);
      return Value(std::move(out));
    }
  }
  if (op == "*") {
    if ((is_string(a) || is_list(a)) && both_ints(b, b)) return repeat(a, int_of(b, line, "*"));
    if ((is_string(b) || is_list(b)) && both_ints(a, a)) return repeat(b, int_of(a, line, "*"));
  }
  if (!numeric(a) || !numeric(b)) {
    fail(line, "unsupported operands for " + op + ": " +
                   (a.undefined() ? "undefined" : repr(as_json(a))) + " and " +
                   (b.undefined() ? "undefined" : repr(as_json(b))));
  }
  if (both_ints(a, b) && op != "/" && op != "**") {
    const int64_t x = int_of(a, line, op.c_str()), y = int_of(b, line, op.c_str());
    if (op == "+") return Value(Json(x + y));
    if (op == "-") return Value(Json(x - y));
    if (op == "*") return Value(Json(x * y));
    if (y == 0) fail(line, "division by zero");
    if (op == "//") return Value(Json(floor_div(x, y)));
    if (op == "%") return Value(Json(x - floor_div(x, y) * y));
  }
  if (both_ints(a, b) && op == "**" && int_of(b, line, "**") >= 0) {
    int64_t r = 1;
    for (int64_t i = 0, base = int_of(a, line, "**"); i < int_of(b, line, "**"); ++i) r *= base;
    return Value(Json(r));
  }
  const double x = double_of(a, line, op.c_str()), y = double_of(b, line, op.c_str());
  if (op == "+") return Value(Json(x + y));
  if (op == "-") return Value(Json(x - y));
  if (op == "*") return Value(Json(x * y));
  if (op == "**") return Value(Json(std::pow(x, y)));
  if (y == 0) fail(line, "division by zero");
  if (op == "/") return Value(Json(x / y));
  if (op == "//") return Value(Json(std::floor(x / y)));
  if (op == "%") return Value(Json(x - std::floor(x / y) * y));
  fail(line, "unknown operator " + op);
}

}  // namespace pagoda::jinja
