// Typed, checked reads of the fields of one JSON object (a Hugging Face
// config). A field that is missing or null keeps the caller's default; a
// field of the wrong type or range is an InputError naming the file, the
// field and the value found, so a user can fix their config.json.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace pagoda {

// Reads FILE as JSON. Errors name the file and, for bad JSON, the parse
// position reported by nlohmann ("line 3, column 7").
nlohmann::json read_json_file(const std::string& file);

// A short, printable rendering of a JSON value for error messages. Arrays
// and objects are named, not printed: a hostile config could nest them
// deeply enough to overflow the stack of a recursive dump.
std::string describe_json(const nlohmann::json& v);

class JsonFields {
 public:
  // `prefix` is prepended to field names in messages ("rope_scaling.").
  JsonFields(const nlohmann::json& object, std::string file, std::string prefix = "")
      : j_(object), file_(std::move(file)), prefix_(std::move(prefix)) {}

  bool has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }
  const nlohmann::json& at(const char* key) const { return j_.at(key); }
  const std::string& file() const { return file_; }

  [[noreturn]] void fail(const char* key, std::string_view what) const {
    throw_input_error("{}: field '{}{}' must be {}, got {}", file_, prefix_, key, what,
                      describe_json(j_.at(key)));
  }
  [[noreturn]] void missing(const char* key) const {
    throw_input_error("{}: missing required field '{}{}'", file_, prefix_, key);
  }

  // Sizes are capped at 2^31 - 1 so products of a few of them (e.g.
  // vocab_size x hidden_size) cannot overflow int64 downstream.
  void positive_int(const char* key, int64_t& out) const { bounded_int(key, 1, out); }
  void non_negative_int(const char* key, int64_t& out) const { bounded_int(key, 0, out); }
  int64_t required_positive_int(const char* key) const {
    if (!has(key)) missing(key);
    int64_t v = 0;
    positive_int(key, v);
    return v;
  }

  // Any finite JSON number; `positive` also refuses zero and negatives.
  void number(const char* key, double& out, bool positive = false) const {
    if (!has(key)) return;
    const char* what = positive ? "a positive number" : "a number";
    if (!at(key).is_number()) fail(key, what);
    const double v = at(key).get<double>();
    if (!std::isfinite(v) || (positive && !(v > 0))) fail(key, what);
    out = v;
  }

  void boolean(const char* key, bool& out) const {
    if (!has(key)) return;
    if (!at(key).is_boolean()) fail(key, "true or false");
    out = at(key).get<bool>();
  }

  void string(const char* key, std::string& out) const {
    if (!has(key)) return;
    if (!at(key).is_string()) fail(key, "a string");
    out = at(key).get<std::string>();
  }

  // A token id: an integer in [0, 2^31).
  void token_id(const char* key, std::optional<int32_t>& out) const {
    if (!has(key)) return;
    int32_t id = 0;
    if (!as_token_id(at(key), id)) fail(key, "a token id (a non-negative integer)");
    out = id;
  }

  // One token id or a list of them (eos_token_id).
  void token_ids(const char* key, std::vector<int32_t>& out) const {
    if (!has(key)) return;
    const char* what = "a token id or a list of token ids";
    const nlohmann::json& v = at(key);
    std::vector<int32_t> ids;
    int32_t id = 0;
    if (v.is_array()) {
      for (const auto& e : v) {
        if (!as_token_id(e, id)) fail(key, what);
        ids.push_back(id);
      }
    } else if (as_token_id(v, id)) {
      ids.push_back(id);
    } else {
      fail(key, what);
    }
    out = std::move(ids);
  }

 private:
  void bounded_int(const char* key, int64_t min, int64_t& out) const {
    if (!has(key)) return;
    constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
    const nlohmann::json& v = at(key);
    const char* what = min > 0 ? "a positive integer" : "a non-negative integer";
    if (!v.is_number_integer()) fail(key, what);
    if (v.is_number_unsigned()) {
      if (v.get<uint64_t>() > static_cast<uint64_t>(kMax)) fail(key, "at most 2147483647");
    } else if (v.get<int64_t>() > kMax) {
      fail(key, "at most 2147483647");
    }
    if (v.get<int64_t>() < min) fail(key, what);
    out = v.get<int64_t>();
  }

  static bool as_token_id(const nlohmann::json& v, int32_t& out) {
    constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
    if (!v.is_number_integer()) return false;
    if (v.is_number_unsigned() ? v.get<uint64_t>() > static_cast<uint64_t>(kMax)
                               : (v.get<int64_t>() < 0 || v.get<int64_t>() > kMax)) {
      return false;
    }
    out = static_cast<int32_t>(v.get<int64_t>());
    return true;
  }

  const nlohmann::json& j_;
  std::string file_;
  std::string prefix_;
};

}  // namespace pagoda
