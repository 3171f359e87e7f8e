#include "structured/output_spec.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "structured/json_schema_to_grammar.h"
#include "structured/regex_to_grammar.h"

namespace pagoda::structured {

const char* OutputSpec::kind_name() const {
  switch (kind) {
    case Kind::None: return "none";
    case Kind::JsonSchema: return "json";
    case Kind::JsonObject: return "json_object";
    case Kind::Regex: return "regex";
    case Kind::Choice: return "choice";
    case Kind::Grammar: return "grammar";
  }
  return "";
}

std::string OutputSpec::to_gbnf() const {
  switch (kind) {
    case Kind::None: throw_input_error("no output constraint");
    case Kind::JsonObject: return json_object_gbnf();
    case Kind::Grammar: return value;
    case Kind::Regex: return regex_to_gbnf(value);
    case Kind::JsonSchema: {
      nlohmann::ordered_json schema;
      try {
        schema = nlohmann::ordered_json::parse(value);
      } catch (const nlohmann::json::exception& e) {
        throw_input_error("JSON schema: not valid JSON: {}", e.what());
      }
      return json_schema_to_gbnf(schema);
    }
    case Kind::Choice: {
      nlohmann::json choices;
      try {
        choices = nlohmann::json::parse(value);
      } catch (const nlohmann::json::exception& e) {
        throw_input_error("choice: not valid JSON: {}", e.what());
      }
      if (!choices.is_array() || choices.empty())
        throw_input_error("choice: must be a non-empty list of strings");
      std::string out = "root ::= ";
      for (size_t i = 0; i < choices.size(); ++i) {
        if (!choices[i].is_string() || choices[i].get<std::string>().empty())
          throw_input_error("choice: must be a non-empty list of non-empty strings");
        out += (i ? " | " : "") + gbnf_literal(choices[i].get<std::string>());
      }
      return out + "\n";
    }
  }
  return "";
}

}  // namespace pagoda::structured
