#include "tokenizer/jinja/value.h"

#include <charconv>
#include <cmath>

namespace pagoda::jinja {

namespace {

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d);
  std::string s(buf, res.ptr);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

void json_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

void dump(std::string& out, const Json& j, int indent, int depth) {
  // indent < 0 is Python's indent=None: one line, ", " between items.
  const std::string nl =
      indent >= 0 ? "\n" + std::string(static_cast<size_t>(indent * (depth + 1)), ' ') : "";
  const std::string nl_end =
      indent >= 0 ? "\n" + std::string(static_cast<size_t>(indent * depth), ' ') : "";
  const char* sep = indent >= 0 ? "," : ", ";
  switch (j.type()) {
    case Json::value_t::object: {
      if (j.empty()) {
        out += "{}";
        return;
      }
      out += '{';
      bool first = true;
      for (const auto& [k, v] : j.items()) {
        if (!first) out += sep;
        first = false;
        out += nl;
        json_string(out, k);
        out += ": ";
        dump(out, v, indent, depth + 1);
      }
      out += nl_end + '}';
      return;
    }
    case Json::value_t::array: {
      if (j.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < j.size(); ++i) {
        if (i) out += sep;
        out += nl;
        dump(out, j[i], indent, depth + 1);
      }
      out += nl_end + ']';
      return;
    }
    case Json::value_t::string:
      json_string(out, j.get_ref<const std::string&>());
      return;
    case Json::value_t::boolean:
      out += j.get<bool>() ? "true" : "false";
      return;
    case Json::value_t::null:
      out += "null";
      return;
    case Json::value_t::number_float:
      out += float_repr(j.get<double>());
      return;
    default:
      out += j.dump();
      return;  // integers
  }
}

}  // namespace

bool truthy(const Value& v) {
  if (v.kind == Value::Kind::Undefined) return false;
  if (v.kind != Value::Kind::Data) return true;
  const Json& j = v.data;
  switch (j.type()) {
    case Json::value_t::null:
      return false;
    case Json::value_t::boolean:
      return j.get<bool>();
    case Json::value_t::string:
      return !j.get_ref<const std::string&>().empty();
    case Json::value_t::array:
    case Json::value_t::object:
      return !j.empty();
    case Json::value_t::number_float:
      return j.get<double>() != 0.0;
    default:
      return j.get<int64_t>() != 0;
  }
}

std::string repr(const Json& j) {
  switch (j.type()) {
    case Json::value_t::string: {
      const std::string& s = j.get_ref<const std::string&>();
      const char q =
          s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
      std::string out(1, q);
      for (char c : s) {
        if (c == q || c == '\\') out += '\\';
        if (c == '\n') {
          out += "\\n";
          continue;
        }
        out += c;
      }
      return out + q;
    }
    case Json::value_t::array: {
      std::string out = "[";
      for (size_t i = 0; i < j.size(); ++i) out += (i ? ", " : "") + repr(j[i]);
      return out + "]";
    }
    case Json::value_t::object: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, v] : j.items()) {
        out += (first ? "" : ", ") + repr(Json(k)) + ": " + repr(v);
        first = false;
      }
      return out + "}";
    }
    default:
      return to_str(Value(j));
  }
}

std::string to_str(const Value& v) {
  if (v.kind == Value::Kind::Undefined) return "";
  if (v.kind == Value::Kind::Namespace) return "<Namespace>";
  if (v.kind == Value::Kind::Callable) return "<function>";
  const Json& j = v.data;
  switch (j.type()) {
    case Json::value_t::string:
      return j.get<std::string>();
    case Json::value_t::null:
      return "None";
    case Json::value_t::boolean:
      return j.get<bool>() ? "True" : "False";
    case Json::value_t::number_float:
      return float_repr(j.get<double>());
    case Json::value_t::array:
    case Json::value_t::object:
      return repr(j);
    default:
      return j.dump();
  }
}

std::string to_json(const Json& j, int indent) {
  std::string out;
  dump(out, j, indent, 0);
  return out;
}

}  // namespace pagoda::jinja
