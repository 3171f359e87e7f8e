// The syntax tree of a Jinja2 template (the subset Hugging Face chat
// templates use): expressions and statements, produced by parser.cpp and
// run by evaluator.cpp.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace pagoda::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    Literal,  // value
    Name,     // name
    List,     // items
    Dict,     // items as key, value pairs
    Attr,     // items[0].name
    Index,    // items[0][items[1]]
    Slice,    // items[0][items[1]:items[2]:items[3]] (null = omitted)
    Call,     // items[0](items[1..], kwargs)
    Filter,   // items[0] | name(items[1..], kwargs)
    Test,     // items[0] is [not] name(items[1..])
    Unary,    // op items[0]   ("not", "-", "+")
    Binary,   // items[0] op items[1]
    Ternary,  // items[0] if items[1] else items[2] (items[2] may be null)
  };
  Kind kind;
  nlohmann::ordered_json value;  // Literal
  std::string name;              // Name, Attr, Filter, Test, op of Unary/Binary
  bool negated = false;          // Test: "is not"
  std::vector<ExprPtr> items;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;  // Call, Filter
  int line = 0;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind { Text, Output, If, For, Set, SetBlock, Macro, Break, Continue };
  Kind kind;
  std::string text;                  // Text
  ExprPtr expr;                      // Output, Set value, For iterable
  std::vector<ExprPtr> conditions;   // If: one per branch (else branch has none)
  std::vector<Body> branches;        // If branches; For: {body, else}; Macro/SetBlock: {body}
  std::vector<std::string> targets;  // For loop variables; Set: name or {ns, attr}; Macro: name
  ExprPtr filter;                    // For ... if filter
  std::vector<std::pair<std::string, ExprPtr>> params;  // Macro parameters with defaults
  int line = 0;
};

struct Template {
  Body body;
};

// Parses template source (trim_blocks and lstrip_blocks on, as transformers
// renders chat templates). Throws InputError "line N: ..." on syntax errors.
std::shared_ptr<const Template> parse(const std::string& source);

}  // namespace pagoda::jinja
