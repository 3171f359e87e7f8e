#include "tokenizer/jinja/evaluator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>

#include "core/error.h"
#include "tokenizer/jinja/builtins.h"

namespace pagoda::jinja {

namespace {

enum class Flow { Normal, Break, Continue };
constexpr int kMaxDepth = 64;

class Evaluator {
 public:
  explicit Evaluator(const std::map<std::string, Value>& globals) { scopes_.emplace_back(globals); }

  std::string out;

  Flow exec(const Body& body) {
    for (const StmtPtr& s : body) {
      const Flow f = exec(*s);
      if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
  }

 private:
  [[noreturn]] void fail(int line, const std::string& why) const {
    throw InputError("line " + std::to_string(line) + ": " + why);
  }

  Value lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      const auto found = it->find(name);
      if (found != it->end()) return found->second;
    }
    return builtin_global(name);
  }

  Flow exec(const Stmt& s) {
    switch (s.kind) {
      case Stmt::Kind::Text:
        out += s.text;
        return Flow::Normal;
      case Stmt::Kind::Output:
        out += to_str(eval(*s.expr));
        return Flow::Normal;
      case Stmt::Kind::If:
        for (size_t i = 0; i < s.branches.size(); ++i) {
          if (i >= s.conditions.size() || truthy(eval(*s.conditions[i])))
            return exec(s.branches[i]);
        }
        return Flow::Normal;
      case Stmt::Kind::For:
        return exec_for(s);
      case Stmt::Kind::Set: {
        Value v = eval(*s.expr);
        assign(s, std::move(v));
        return Flow::Normal;
      }
      case Stmt::Kind::SetBlock: {
        std::string saved;
        saved.swap(out);
        exec(s.branches[0]);
        saved.swap(out);
        assign(s, Value(Json(saved)));
        return Flow::Normal;
      }
      case Stmt::Kind::Macro:
        define_macro(s);
        return Flow::Normal;
      case Stmt::Kind::Break:
        return Flow::Break;
      case Stmt::Kind::Continue:
        return Flow::Continue;
    }
    return Flow::Normal;
  }

  void assign(const Stmt& s, Value v) {
    if (s.targets.size() == 1) {
      scopes_.back()[s.targets[0]] = std::move(v);
      return;
    }
    Value target = lookup(s.targets[0]);
    if (target.kind != Value::Kind::Namespace)
      fail(s.line, "cannot set an attribute of '" + s.targets[0] + "' (not a namespace)");
    (*target.ns)[s.targets[1]] = v.is_data() ? v.data : Json();
  }

  Flow exec_for(const Stmt& s) {
    Value iterable = eval(*s.expr);
    Json items = Json::array();
    if (iterable.is_data()) {
      const Json& j = iterable.data;
      if (j.is_array()) {
        items = j;
      } else if (j.is_object()) {
        for (const auto& [k, _] : j.items()) items.push_back(k);
      } else if (j.is_string()) {
        for (const std::string& ch : utf8_chars(j.get<std::string>())) items.push_back(ch);
      } else if (!j.is_null()) {
        fail(s.line, "cannot iterate over " + to_str(iterable));
      }
    }
    // Apply the loop filter first: loop.* counts only the kept items.
    if (s.filter) {
      Json kept = Json::array();
      for (const Json& item : items) {
        scopes_.emplace_back();
        bind_targets(s, item);
        if (truthy(eval(*s.filter))) kept.push_back(item);
        scopes_.pop_back();
      }
      items = std::move(kept);
    }
    if (items.empty()) return exec(s.branches[1]);
    const auto n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      scopes_.emplace_back();
      bind_targets(s, items[i]);
      Json loop = {{"index", i + 1},        {"index0", i}, {"first", i == 0},
                   {"last", i == n - 1},    {"length", n}, {"revindex", n - i},
                   {"revindex0", n - i - 1}};
      loop["previtem"] = i > 0 ? items[i - 1] : Json();
      loop["nextitem"] = i + 1 < n ? items[i + 1] : Json();
      scopes_.back()["loop"] = Value(std::move(loop));
      const Flow f = exec(s.branches[0]);
      scopes_.pop_back();
      if (f == Flow::Break) break;
    }
    return Flow::Normal;
  }

  void bind_targets(const Stmt& s, const Json& item) {
    if (s.targets.size() == 1) {
      scopes_.back()[s.targets[0]] = Value(item);
      return;
    }
    if (!item.is_array() || item.size() != s.targets.size())
      fail(s.line, "cannot unpack loop item " + repr(item));
    for (size_t k = 0; k < s.targets.size(); ++k) scopes_.back()[s.targets[k]] = Value(item[k]);
  }

  void define_macro(const Stmt& s) {
    const Stmt* macro = &s;
    scopes_.back()[s.targets[0]] = Value::function([this, macro](Args& args, Kwargs& kwargs) {
      if (++depth_ > kMaxDepth) fail(macro->line, "macro recursion too deep");
      std::map<std::string, Value> frame;
      for (size_t i = 0; i < macro->params.size(); ++i) {
        const auto& [name, def] = macro->params[i];
        if (i < args.size())
          frame[name] = args[i];
        else if (def)
          frame[name] = eval(*def);
      }
      for (auto& [k, v] : kwargs) frame[k] = v;
      std::vector<std::map<std::string, Value>> saved = {scopes_.front(), std::move(frame)};
      std::swap(saved, scopes_);
      std::string saved_out;
      saved_out.swap(out);
      exec(macro->branches[0]);
      saved_out.swap(out);
      std::swap(saved, scopes_);
      --depth_;
      return Value(Json(saved_out));
    });
  }

  Value eval(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::Literal:
        return Value(e.value);
      case Expr::Kind::Name:
        return lookup(e.name);
      case Expr::Kind::List: {
        Json list = Json::array();
        for (const ExprPtr& item : e.items) list.push_back(as_json(eval(*item)));
        return Value(std::move(list));
      }
      case Expr::Kind::Dict: {
        Json dict = Json::object();
        for (size_t i = 0; i + 1 < e.items.size(); i += 2)
          dict[to_str(eval(*e.items[i]))] = as_json(eval(*e.items[i + 1]));
        return Value(std::move(dict));
      }
      case Expr::Kind::Attr:
        return get_attr(eval(*e.items[0]), e.name);
      case Expr::Kind::Index:
        return get_item(eval(*e.items[0]), eval(*e.items[1]));
      case Expr::Kind::Slice: {
        auto opt = [&](const ExprPtr& p) { return p ? eval(*p) : Value(); };
        return slice(eval(*e.items[0]), opt(e.items[1]), opt(e.items[2]), opt(e.items[3]), e.line);
      }
      case Expr::Kind::Call: {
        Value fn = eval(*e.items[0]);
        if (fn.kind != Value::Kind::Callable)
          fail(e.line, "calling something that is not a function");
        Args args;
        Kwargs kwargs;
        eval_args(e, 1, args, kwargs);
        return (*fn.call)(args, kwargs);
      }
      case Expr::Kind::Filter: {
        Args args{eval(*e.items[0])};
        Kwargs kwargs;
        eval_args(e, 1, args, kwargs);
        return apply_filter(e.name, args, kwargs, e.line);
      }
      case Expr::Kind::Test: {
        Args args;
        Kwargs none;
        for (const ExprPtr& a : e.items) args.push_back(eval(*a));
        const bool r = apply_test(e.name, args, e.line);
        return Value(Json(e.negated ? !r : r));
      }
      case Expr::Kind::Unary: {
        Value v = eval(*e.items[0]);
        if (e.name == "not") return Value(Json(!truthy(v)));
        if (!v.is_data() || !v.data.is_number())
          fail(e.line, "unary " + e.name + " needs a number");
        if (e.name == "+") return v;
        return v.data.is_number_float() ? Value(Json(-v.data.get<double>()))
                                        : Value(Json(-v.data.get<int64_t>()));
      }
      case Expr::Kind::Binary: {
        if (e.name == "and") {
          Value a = eval(*e.items[0]);
          return truthy(a) ? eval(*e.items[1]) : a;
        }
        if (e.name == "or") {
          Value a = eval(*e.items[0]);
          return truthy(a) ? a : eval(*e.items[1]);
        }
        return binary_op(e.name, eval(*e.items[0]), eval(*e.items[1]), e.line);
      }
      case Expr::Kind::Ternary:
        if (truthy(eval(*e.items[1]))) return eval(*e.items[0]);
        return e.items[2] ? eval(*e.items[2]) : Value();
    }
    return Value();
  }

  void eval_args(const Expr& e, size_t from, Args& args, Kwargs& kwargs) {
    for (size_t i = from; i < e.items.size(); ++i) args.push_back(eval(*e.items[i]));
    for (const auto& [k, v] : e.kwargs) kwargs.emplace_back(k, eval(*v));
  }

  std::vector<std::map<std::string, Value>> scopes_;
  int depth_ = 0;
};

}  // namespace

std::string render(const Template& t, const std::map<std::string, Value>& variables) {
  Evaluator ev(variables);
  ev.exec(t.body);
  return std::move(ev.out);
}

}  // namespace pagoda::jinja
