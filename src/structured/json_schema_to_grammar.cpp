#include "structured/json_schema_to_grammar.h"

#include <cmath>
#include <functional>
#include <optional>
#include <map>
#include <set>

#include "core/error.h"
#include "structured/regex_to_grammar.h"

namespace pagoda::structured {

namespace {

using Json = nlohmann::ordered_json;

constexpr int64_t kMaxAbsInteger = 999'999'999'999'999;  // 15 digits

// String contents: runs of unescaped characters and escape sequences.
const char* kStringRules = R"(json-char ::= [^"\\\x00-\x1F]
json-escape ::= "\\" ["\\/bfnrt] | "\\u" [0-9a-fA-F]{4}
json-string ::= "\"" [^"\\\x00-\x1F]* (json-escape [^"\\\x00-\x1F]*)* "\""
)";
const char* kValueRules = R"(json-value ::= json-object | json-array | json-string | json-number | "true" | "false" | "null"
json-object ::= "{" (json-string ":" json-value ("," json-string ":" json-value)*)? "}"
json-array ::= "[" (json-value ("," json-value)*)? "]"
json-number ::= "-"? ("0" | [1-9] [0-9]{0,14}) ("." [0-9]{1,6})?
)";

// Integers of the same digit count [lo, hi] (decimal strings, equal length)
// as digit classes: the classic range-to-regex split.
std::string same_length_range(const std::string& lo, const std::string& hi) {
  if (lo.empty()) return "";
  if (lo[0] == hi[0]) return gbnf_literal(lo.substr(0, 1)) + " " + same_length_range(lo.substr(1), hi.substr(1));
  const size_t rest = lo.size() - 1;
  auto any_digits = [&] {
    std::string s;
    for (size_t i = 0; i < rest; ++i) s += " [0-9]";
    return s;
  };
  auto cls = [](char a, char b) {
    return a == b ? std::string("\"") + a + "\"" : std::string("[") + a + "-" + b + "]";
  };
  if (lo.substr(1) == std::string(rest, '0') && hi.substr(1) == std::string(rest, '9'))
    return cls(lo[0], hi[0]) + any_digits();
  std::vector<std::string> parts;
  parts.push_back(gbnf_literal(lo.substr(0, 1)) + " (" + same_length_range(lo.substr(1), std::string(rest, '9')) + ")");
  if (hi[0] - lo[0] > 1) parts.push_back(cls(lo[0] + 1, hi[0] - 1) + any_digits());
  parts.push_back(gbnf_literal(hi.substr(0, 1)) + " (" + same_length_range(std::string(rest, '0'), hi.substr(1)) + ")");
  std::string out = "(";
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? " | " : "") + parts[i];
  return out + ")";
}

// Non-negative integers in [lo, hi], without leading zeros.
std::string natural_range(int64_t lo, int64_t hi) {
  std::vector<std::string> parts;
  for (size_t len = std::to_string(lo).size(); len <= std::to_string(hi).size(); ++len) {
    const int64_t first = len == 1 ? 0 : static_cast<int64_t>(std::pow(10, len - 1));
    const int64_t last = static_cast<int64_t>(std::pow(10, len)) - 1;
    const int64_t a = std::max(lo, first), b = std::min(hi, last);
    if (a <= b) parts.push_back(same_length_range(std::to_string(a), std::to_string(b)));
  }
  std::string out = "(";
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? " | " : "") + parts[i];
  return out + ")";
}

// Integers in [lo, hi] (lo <= hi).
std::string integer_range(int64_t lo, int64_t hi) {
  std::vector<std::string> parts;
  if (lo < 0) parts.push_back("\"-\" " + natural_range(std::max<int64_t>(1, -hi), -lo));
  if (hi >= 0) parts.push_back(natural_range(std::max<int64_t>(0, lo), hi));
  return parts.size() == 1 ? parts[0] : "(" + parts[0] + " | " + parts[1] + ")";
}

class Converter {
 public:
  Converter(const Json& root, std::string prefix) : root_(root), prefix_(std::move(prefix)) {}

  std::string convert(const std::string& root_name) {
    const std::string root = visit(root_, "root");
    std::string out = root_name + " ::= " + root + "\n";
    for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
    if (need_string_) out += kStringRules;
    if (need_value_) out += kValueRules;
    if (prefix_.empty()) return out;
    // The shared JSON rules too: each schema gets its own copy.
    // Names are found outside literals "..." and classes [...] only.
    std::string prefixed;
    char quote = 0;  // '"' or ']' while inside one
    for (size_t i = 0; i < out.size(); ++i) {
      const char c = out[i];
      if (quote) {
        prefixed += c;
        if (c == '\\' && i + 1 < out.size()) prefixed += out[++i];
        else if (c == quote) quote = 0;
        continue;
      }
      if (c == '"') quote = '"';
      if (c == '[') quote = ']';
      if (out.compare(i, 5, "json-") == 0 && (i == 0 || !std::isalnum(static_cast<unsigned char>(out[i - 1]))))
        prefixed += prefix_;
      prefixed += c;
    }
    return prefixed;
  }

 private:
  [[noreturn]] void fail(const std::string& where, const std::string& what) const {
    throw_input_error("JSON schema{}: {}", where.empty() ? "" : " at " + where, what);
  }

  std::string new_rule(const std::string& hint, const std::string& body) {
    std::string name;
    for (char c : hint) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '-';
    name = prefix_ + "s-" + name + "-" + std::to_string(rules_.size());
    rules_[name] = body;
    return name;
  }

  std::string any_value() {
    need_value_ = true;
    need_string_ = true;
    return "json-value";
  }

  std::string visit(const Json& s, const std::string& path) {
    if (s.is_boolean()) {
      if (!s.get<bool>()) fail(path, "the schema false matches nothing");
      return any_value();
    }
    if (!s.is_object()) fail(path, "a schema must be an object or a boolean");
    static const std::set<std::string> kIgnored = {
        "title", "description", "default", "examples", "$schema", "$id", "$comment",
        "deprecated", "readOnly", "writeOnly", "strict", "$defs", "definitions"};
    static const std::set<std::string> kKnown = {
        "type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "properties", "required",
        "additionalProperties", "items", "prefixItems", "minItems", "maxItems", "minLength",
        "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum",
        "exclusiveMaximum"};
    for (const auto& [key, value] : s.items()) {
      if (!kIgnored.count(key) && !kKnown.count(key))
        fail(path, "unsupported keyword \"" + key + "\"");
    }
    if (s.contains("$ref")) return ref(s["$ref"], path);
    if (s.contains("const")) return gbnf_literal(s["const"].dump());
    if (s.contains("enum")) {
      if (!s["enum"].is_array() || s["enum"].empty()) fail(path, "enum must be a non-empty array");
      std::string out = "(";
      for (size_t i = 0; i < s["enum"].size(); ++i) out += (i ? " | " : "") + gbnf_literal(s["enum"][i].dump());
      return out + ")";
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      if (!s[key].is_array() || s[key].empty()) fail(path, std::string(key) + " must be a non-empty array");
      std::string out = "(";
      for (size_t i = 0; i < s[key].size(); ++i)
        out += (i ? " | " : "") + visit(s[key][i], path + "/" + key + "/" + std::to_string(i));
      return out + ")";
    }
    if (s.contains("allOf")) {
      if (!s["allOf"].is_array() || s["allOf"].size() != 1)
        fail(path, "allOf is supported with exactly one schema");
      return visit(s["allOf"][0], path + "/allOf/0");
    }
    if (!s.contains("type")) {
      if (s.contains("properties")) return object(s, path);
      if (s.contains("items") || s.contains("prefixItems")) return array(s, path);
      return any_value();
    }
    const Json& type = s["type"];
    if (type.is_array()) {
      if (type.empty()) fail(path, "type must not be an empty list");
      std::string out = "(";
      for (size_t i = 0; i < type.size(); ++i) {
        if (!type[i].is_string()) fail(path, "type must hold strings");
        out += (i ? " | " : "") + typed(s, type[i].get<std::string>(), path);
      }
      return out + ")";
    }
    if (!type.is_string()) fail(path, "type must be a string or a list of strings");
    return typed(s, type.get<std::string>(), path);
  }

  std::string typed(const Json& s, const std::string& type, const std::string& path) {
    if (type == "object") return object(s, path);
    if (type == "array") return array(s, path);
    if (type == "string") return string(s, path);
    if (type == "integer") return integer(s, path);
    if (type == "number") return number(s, path);
    if (type == "boolean") return "(\"true\" | \"false\")";
    if (type == "null") return "\"null\"";
    fail(path, "unknown type \"" + type + "\"");
  }

  std::string ref(const Json& r, const std::string& path) {
    if (!r.is_string()) fail(path, "$ref must be a string");
    const std::string target = r.get<std::string>();
    const auto known = refs_.find(target);
    if (known != refs_.end()) return known->second;
    const Json* schema = nullptr;
    if (target == "#") {
      schema = &root_;
    } else {
      for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
        const std::string p = prefix;
        if (target.compare(0, p.size(), p) != 0) continue;
        const std::string defs = p.substr(2, p.size() - 3);
        const std::string name = target.substr(p.size());
        if (root_.contains(defs) && root_[defs].is_object() && root_[defs].contains(name))
          schema = &root_[defs][name];
      }
    }
    if (!schema) fail(path, "$ref \"" + target + "\" is not #, #/$defs/NAME or #/definitions/NAME of this schema");
    // The rule is named before its body is built, so recursion refers to it.
    std::string name;
    for (char c : target) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '-';
    name = prefix_ + "ref" + name + "-" + std::to_string(refs_.size());
    refs_[target] = name;
    rules_[name] = "";
    rules_[name] = visit(*schema, target);
    return name;
  }

  int64_t count(const Json& s, const char* key, const std::string& path, int64_t dflt) {
    if (!s.contains(key)) return dflt;
    if (!s[key].is_number_integer() || s[key].get<int64_t>() < 0)
      fail(path, std::string(key) + " must be a non-negative integer");
    if (s[key].get<int64_t>() > 100000) fail(path, std::string(key) + " above 100000 is not supported");
    return s[key].get<int64_t>();
  }

  std::string object(const Json& s, const std::string& path) {
    std::vector<std::pair<std::string, std::string>> props;  // (key literal, value expression)
    std::vector<bool> required;
    std::set<std::string> required_names;
    if (s.contains("required")) {
      if (!s["required"].is_array()) fail(path, "required must be an array of names");
      for (const auto& r : s["required"]) {
        if (!r.is_string()) fail(path, "required must be an array of names");
        required_names.insert(r.get<std::string>());
      }
    }
    if (s.contains("properties")) {
      if (!s["properties"].is_object()) fail(path, "properties must be an object");
      for (const auto& [key, sub] : s["properties"].items()) {
        props.emplace_back(gbnf_literal(Json(key).dump() + ":"), visit(sub, path + "/properties/" + key));
        required.push_back(required_names.count(key) > 0);
        required_names.erase(key);
      }
    }
    if (!required_names.empty())
      fail(path, "required names \"" + *required_names.begin() + "\", which is not in properties");
    const Json extra = s.contains("additionalProperties") ? s["additionalProperties"] : Json(false);
    if (props.empty() && !(extra.is_boolean() && !extra.get<bool>())) {
      need_string_ = true;
      const std::string value = visit(extra, path + "/additionalProperties");
      const std::string pair = "json-string \":\" " + value;
      return "\"{\" (" + pair + " (\",\" " + pair + ")*)? \"}\"";
    }
    // tail(i, comma): properties i.. given whether one was written before
    // (so the next needs a comma); optional ones may be skipped. One rule
    // per (i, comma) keeps the grammar linear in the property count.
    std::map<std::pair<size_t, bool>, std::string> memo;
    std::function<std::string(size_t, bool)> tail = [&](size_t i, bool comma) -> std::string {
      if (i == props.size()) return "";
      const auto key = std::make_pair(i, comma);
      if (memo.count(key)) return memo[key];
      const std::string write = (comma ? "\",\" " : "") + props[i].first + " " + props[i].second;
      const std::string after = tail(i + 1, true);
      std::string body = write + " " + after;
      if (!required[i]) {
        const std::string skip = tail(i + 1, comma);
        body = "(" + body + ") | (" + skip + ")";
      }
      return memo[key] = new_rule("obj", body);
    };
    return "\"{\" " + tail(0, false) + " \"}\"";
  }

  std::string array(const Json& s, const std::string& path) {
    const int64_t min = count(s, "minItems", path, 0);
    const int64_t max = count(s, "maxItems", path, -1);
    if (max >= 0 && max < min) fail(path, "maxItems is below minItems");
    std::vector<std::string> prefix;
    if (s.contains("prefixItems")) {
      if (!s["prefixItems"].is_array()) fail(path, "prefixItems must be an array");
      for (size_t i = 0; i < s["prefixItems"].size(); ++i)
        prefix.push_back(visit(s["prefixItems"][i], path + "/prefixItems/" + std::to_string(i)));
    }
    if (!prefix.empty()) {
      // Every prefix item is written (up to maxItems), then more items
      // only when `items` allows them.
      const size_t n = max >= 0 ? std::min<size_t>(prefix.size(), static_cast<size_t>(max)) : prefix.size();
      if (n == 0) return "\"[]\"";
      std::string out = "\"[\" ";
      for (size_t i = 0; i < n; ++i) out += (i ? "\",\" " : "") + prefix[i] + " ";
      const bool more = s.contains("items") && !(s["items"].is_boolean() && !s["items"].get<bool>());
      if (more && (max < 0 || max > static_cast<int64_t>(n))) {
        const std::string item = visit(s["items"], path + "/items");
        const int64_t lo = std::max<int64_t>(0, min - static_cast<int64_t>(n));
        out += "(\",\" " + item + "){" + std::to_string(lo) + "," + (max < 0 ? "" : std::to_string(max - n)) + "} ";
      } else if (min > static_cast<int64_t>(n)) {
        fail(path, "minItems exceeds prefixItems and items allows no more");
      }
      return out + "\"]\"";
    }
    const std::string item = s.contains("items") ? visit(s["items"], path + "/items") : any_value();
    if (max == 0) return "\"[]\"";
    const std::string more = "(\",\" " + item + "){" + std::to_string(std::max<int64_t>(0, min - 1)) + "," +
                             (max < 0 ? "" : std::to_string(max - 1)) + "}";
    const std::string items = item + " " + more;
    return min == 0 ? "\"[\" (" + items + ")? \"]\"" : "\"[\" " + items + " \"]\"";
  }

  std::string string(const Json& s, const std::string& path) {
    const bool bounded = s.contains("minLength") || s.contains("maxLength");
    if (s.contains("pattern")) {
      if (bounded) fail(path, "pattern together with minLength/maxLength is not supported");
      if (!s["pattern"].is_string()) fail(path, "pattern must be a string");
      return "\"\\\"\" " + regex_to_gbnf_expression(s["pattern"].get<std::string>(), true) + " \"\\\"\"";
    }
    if (s.contains("format")) {
      if (!s["format"].is_string()) fail(path, "format must be a string");
      const std::string f = s["format"].get<std::string>();
      static const std::map<std::string, std::string> kFormats = {
          {"date", R"([0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01]))"},
          {"time", R"(([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9]))"},
          {"date-time", R"([0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9]))"},
          {"uuid", R"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"},
          {"email", R"([a-zA-Z0-9_.+-]{1,32}@[a-zA-Z0-9-]{1,32}(\.[a-zA-Z0-9-]{1,16}){0,3}\.[a-zA-Z]{2,8})"},
          {"ipv4", R"(((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9]))"}};
      const auto it = kFormats.find(f);
      if (it == kFormats.end()) fail(path, "unsupported format \"" + f + "\"");
      if (bounded) fail(path, "format together with minLength/maxLength is not supported");
      return "\"\\\"\" " + regex_to_gbnf_expression(it->second, true) + " \"\\\"\"";
    }
    if (bounded) {
      const int64_t min = count(s, "minLength", path, 0);
      const int64_t max = count(s, "maxLength", path, -1);
      if (max >= 0 && max < min) fail(path, "maxLength is below minLength");
      return "\"\\\"\" [^\"\\\\\\x00-\\x1F]{" + std::to_string(min) + "," + (max < 0 ? "" : std::to_string(max)) +
             "} \"\\\"\"";
    }
    need_string_ = true;
    return "json-string";
  }

  // A bound given as a number: rounded inwards to an integer (exclusive
  // bounds one further in).
  std::optional<int64_t> bound(const Json& s, const char* key, const char* exclusive_key, bool lower,
                               const std::string& path) {
    std::optional<int64_t> out;
    for (const char* k : {key, exclusive_key}) {
      if (!s.contains(k)) continue;
      if (!s[k].is_number()) fail(path, std::string(k) + " must be a number");
      const double v = s[k].get<double>();
      if (std::fabs(v) > static_cast<double>(kMaxAbsInteger))
        fail(path, std::string(k) + " beyond 15 digits is not supported");
      double r = lower ? std::ceil(v) : std::floor(v);
      if (k == exclusive_key && r == v) r += lower ? 1 : -1;
      const auto i = static_cast<int64_t>(r);
      out = out ? (lower ? std::max(*out, i) : std::min(*out, i)) : i;
    }
    return out;
  }

  std::string integer(const Json& s, const std::string& path) {
    const int64_t lo = bound(s, "minimum", "exclusiveMinimum", true, path).value_or(-kMaxAbsInteger);
    const int64_t hi = bound(s, "maximum", "exclusiveMaximum", false, path).value_or(kMaxAbsInteger);
    if (lo > hi) fail(path, "no integer lies between the minimum and the maximum");
    return integer_range(lo, hi);
  }

  std::string number(const Json& s, const std::string& path) {
    const int64_t lo = bound(s, "minimum", "exclusiveMinimum", true, path).value_or(-kMaxAbsInteger);
    const int64_t hi = bound(s, "maximum", "exclusiveMaximum", false, path).value_or(kMaxAbsInteger);
    if (lo > hi) fail(path, "no number with an integer part lies between the minimum and the maximum");
    // An integer, or k.f with k and k + 1 both in range (k >= 0), or
    // -(m.f) with -(m + 1) and -m both in range; the fraction never ends in 0.
    const std::string fraction = "\".\" [0-9]{0,5} [1-9]";
    std::vector<std::string> parts = {integer_range(lo, hi)};
    if (std::max<int64_t>(0, lo) <= hi - 1) parts.push_back(natural_range(std::max<int64_t>(0, lo), hi - 1) + " " + fraction);
    if (std::max<int64_t>(0, -hi) <= -lo - 1)
      parts.push_back("\"-\" " + natural_range(std::max<int64_t>(0, -hi), -lo - 1) + " " + fraction);
    std::string out = "(";
    for (size_t i = 0; i < parts.size(); ++i) out += (i ? " | " : "") + parts[i];
    return out + ")";
  }

  const Json& root_;
  std::string prefix_;
  std::map<std::string, std::string> rules_;
  std::map<std::string, std::string> refs_;
  bool need_string_ = false, need_value_ = false;
};

}  // namespace

std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema, const std::string& root,
                                const std::string& prefix) {
  return Converter(schema, prefix).convert(root);
}

std::string json_object_gbnf() {
  return std::string("root ::= json-object\n") + kStringRules + kValueRules;
}

}  // namespace pagoda::structured
