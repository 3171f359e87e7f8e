#include "structured/grammar.h"

#include <algorithm>
#include <functional>

#include "core/error.h"

namespace pagoda::structured {

bool Element::class_contains(uint32_t cp) const { return class_intersects(cp, cp); }

bool Element::class_intersects(uint32_t lo, uint32_t hi) const {
  // First range ending at or after lo; it intersects when it starts by hi.
  auto it = std::lower_bound(ranges.begin(), ranges.end(), lo,
                             [](const std::pair<uint32_t, uint32_t>& r, uint32_t v) {
                               return r.second < v;
                             });
  return it != ranges.end() && it->first <= hi;
}

namespace {

// Nullable rules: those that can match the empty string (a fixed point).
std::vector<bool> nullable_rules(const Grammar& g) {
  std::vector<bool> nullable(g.rules.size(), false);
  auto element_nullable = [&](const Element& e) {
    return e.min == 0 || (e.kind == Element::Kind::RuleRef && nullable[e.rule]);
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < g.rules.size(); ++r) {
      if (nullable[r]) continue;
      for (const auto& alt : g.rules[r].alternatives) {
        if (std::all_of(alt.begin(), alt.end(), element_nullable)) {
          nullable[r] = true;
          changed = true;
          break;
        }
      }
    }
  }
  return nullable;
}

std::string escape_literal(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02X}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string class_char(uint32_t cp) {
  if (cp == ']' || cp == '\\' || cp == '-' || cp == '^') return std::string("\\") + char(cp);
  if (cp < 0x20 || cp == 0x7f) return fmt::format("\\x{:02X}", cp);
  if (cp < 0x80) return std::string(1, static_cast<char>(cp));
  return fmt::format("\\U{:08X}", cp);
}

}  // namespace

void Grammar::validate() const {
  if (rules.empty()) throw_input_error("grammar: no rules");
  // The matcher expands rule references recursively (CompiledGrammar::
  // decide), as deep as a chain of rules entered without consuming a byte:
  // a bound on the rules bounds that depth.
  constexpr size_t kMaxRules = 4096;
  if (rules.size() > kMaxRules)
    throw_input_error("grammar: {} rules (groups count as rules); at most {}", rules.size(), kMaxRules);
  for (const Rule& r : rules) {
    if (r.alternatives.empty()) throw_input_error("grammar: rule '{}' has no alternatives", r.name);
    for (const auto& alt : r.alternatives) {
      for (const Element& e : alt) {
        if (e.kind == Element::Kind::RuleRef && (e.rule < 0 || e.rule >= int32_t(rules.size())))
          throw_input_error("grammar: rule '{}' refers to an undefined rule", r.name);
        if (e.kind == Element::Kind::Literal && e.literal.empty())
          throw_input_error("grammar: rule '{}' has an empty literal", r.name);
        if (e.kind == Element::Kind::Token && e.token < 0 && e.literal.empty())
          throw_input_error("grammar: rule '{}' has a token with neither an id nor a text", r.name);
        if (e.max != kUnbounded && e.max < e.min)
          throw_input_error("grammar: rule '{}' has a repetition {{{},{}}} with max < min", r.name,
                            e.min, e.max);
      }
    }
  }
  // Productive rules: those that can finish (a fixed point); a matcher in
  // a rule that cannot would accept a prefix with no valid completion.
  std::vector<bool> productive(rules.size(), false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < rules.size(); ++r) {
      if (productive[r]) continue;
      for (const auto& alt : rules[r].alternatives) {
        if (std::all_of(alt.begin(), alt.end(), [&](const Element& e) {
              return e.min == 0 || e.kind != Element::Kind::RuleRef || productive[e.rule];
            })) {
          productive[r] = changed = true;
          break;
        }
      }
    }
  }
  for (size_t r = 0; r < rules.size(); ++r) {
    if (!productive[r])
      throw_input_error("grammar: rule '{}' can never finish (every alternative recurses)",
                        rules[r].name);
  }
  const std::vector<bool> nullable = nullable_rules(*this);
  for (const Rule& r : rules) {
    for (const auto& alt : r.alternatives) {
      for (const Element& e : alt) {
        if (e.max == kUnbounded && e.kind == Element::Kind::RuleRef && nullable[e.rule]) {
          throw_input_error(
              "grammar: rule '{}' repeats '{}' without bound, but '{}' can match the empty string",
              r.name, rules[e.rule].name, rules[e.rule].name);
        }
      }
    }
  }
  // Left recursion: rule r reaches itself through leading (nullable-prefix)
  // references. A depth-first search over the "can start with" graph.
  std::vector<std::vector<int32_t>> starts(rules.size());
  for (size_t r = 0; r < rules.size(); ++r) {
    for (const auto& alt : rules[r].alternatives) {
      for (const Element& e : alt) {
        if (e.kind == Element::Kind::RuleRef) starts[r].push_back(e.rule);
        const bool skippable =
            e.min == 0 || (e.kind == Element::Kind::RuleRef && nullable[e.rule]);
        if (!skippable) break;
      }
    }
  }
  std::vector<int> color(rules.size(), 0);  // 0 new, 1 on the path, 2 done
  std::function<void(int32_t)> visit = [&](int32_t r) {
    color[r] = 1;
    for (int32_t next : starts[r]) {
      if (color[next] == 1)
        throw_input_error("grammar: rule '{}' is left-recursive (it can reach itself before "
                          "matching any text)",
                          rules[next].name);
      if (color[next] == 0) visit(next);
    }
    color[r] = 2;
  };
  for (size_t r = 0; r < rules.size(); ++r)
    if (color[r] == 0) visit(static_cast<int32_t>(r));
}

Grammar Grammar::prefixed(const std::string& literal) const {
  if (literal.empty()) return *this;
  Grammar g;
  Element text;
  text.literal = literal;
  Element old_root;
  old_root.kind = Element::Kind::RuleRef;
  old_root.rule = 1;
  g.rules.push_back(Rule{"prefixed-root", {{text, old_root}}});
  for (Rule r : rules) {
    for (auto& alt : r.alternatives)
      for (Element& e : alt)
        if (e.kind == Element::Kind::RuleRef) ++e.rule;
    g.rules.push_back(std::move(r));
  }
  return g;
}

std::string Grammar::to_string() const {
  std::string out;
  for (const Rule& r : rules) {
    out += r.name + " ::=";
    for (size_t a = 0; a < r.alternatives.size(); ++a) {
      if (a > 0) out += " |";
      for (const Element& e : r.alternatives[a]) {
        out += ' ';
        if (e.kind == Element::Kind::Literal) {
          out += '"' + escape_literal(e.literal) + '"';
        } else if (e.kind == Element::Kind::Class) {
          out += '[';
          for (const auto& [lo, hi] : e.ranges) {
            out += class_char(lo);
            if (hi != lo) out += '-' + class_char(hi);
          }
          out += ']';
        } else if (e.kind == Element::Kind::Token) {
          out += e.literal.empty() ? fmt::format("<[{}]>", e.token) : e.literal;
        } else {
          out += rules[e.rule].name;
        }
        if (e.min == 1 && e.max == 1) continue;
        if (e.max == kUnbounded) {
          out += e.min == 0 ? "*" : e.min == 1 ? "+" : fmt::format("{{{},}}", e.min);
        } else if (e.min == 0 && e.max == 1) {
          out += '?';
        } else {
          out += e.min == e.max ? fmt::format("{{{}}}", e.min) : fmt::format("{{{},{}}}", e.min, e.max);
        }
      }
    }
    out += '\n';
  }
  return out;
}

}  // namespace pagoda::structured
