// Runtime values of the Jinja interpreter: JSON data plus the few kinds
// JSON cannot hold (undefined, namespace objects, callables).
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace pagoda::jinja {

using Json = nlohmann::ordered_json;

struct Value;
using Args = std::vector<Value>;
using Kwargs = std::vector<std::pair<std::string, Value>>;
using Function = std::function<Value(Args&, Kwargs&)>;

struct Value {
  enum class Kind { Undefined, Data, Namespace, Callable };
  Kind kind = Kind::Undefined;
  Json data;                       // Data
  std::shared_ptr<Json> ns;        // Namespace: mutable attribute object
  std::shared_ptr<Function> call;  // Callable

  Value() = default;
  Value(Json j) : kind(Kind::Data), data(std::move(j)) {}  // NOLINT: implicit on purpose
  static Value function(Function f) {
    Value v;
    v.kind = Kind::Callable;
    v.call = std::make_shared<Function>(std::move(f));
    return v;
  }
  bool undefined() const { return kind == Kind::Undefined; }
  bool is_data() const { return kind == Kind::Data; }
};

// Python-like truthiness, str() and repr().
bool truthy(const Value& v);
std::string to_str(const Value& v);
std::string repr(const Json& j);
// json.dumps(x, ensure_ascii=False, indent=indent) as Python writes it;
// indent < 0 stands for indent=None.
std::string to_json(const Json& j, int indent);

}  // namespace pagoda::jinja
