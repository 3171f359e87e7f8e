// JSON Schema as a grammar for compact JSON (no whitespace outside
// strings, as xgrammar with any_whitespace=False), so that output which
// follows the grammar parses and validates against the schema.
//
// Supported keywords (others are an InputError naming the keyword):
//   type (a name or a list), enum, const, anyOf / oneOf (as alternatives),
//   allOf with one member, $ref to #, #/$defs/NAME or #/definitions/NAME
//   (recursion allowed), $defs / definitions;
//   object: properties (written in the schema's order), required (the
//   others may be left out), additionalProperties (false by default: only
//   the listed properties are written; true or a schema only on an object
//   without properties, whose keys are then free strings);
//   array: items, prefixItems, minItems, maxItems;
//   string: minLength, maxLength, pattern (regex_to_grammar.h, matched in
//   full), format (date, time, date-time, uuid, email, ipv4);
//   integer / number: minimum, maximum, exclusiveMinimum, exclusiveMaximum
//   (number bounds rounded inwards to integers).
// Annotations (title, description, default, examples, $schema, $id,
// $comment, deprecated, readOnly, writeOnly, strict) are ignored.
// Bounds keep generation finite: integers have at most 15 digits, numbers
// at most 15 integer and 6 fraction digits and no exponent; strings without
// maxLength and arrays without maxItems are unbounded (set them to bound
// output length). Strings with a length bound or pattern contain no escape
// sequences.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace pagoda::structured {

// `root`: the name of the rule for the whole schema; every other rule's
// name starts with `prefix`, so several schemas can share one grammar.
std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema, const std::string& root = "root",
                                const std::string& prefix = "");
// Any JSON object (response_format json_object).
std::string json_object_gbnf();

}  // namespace pagoda::structured
