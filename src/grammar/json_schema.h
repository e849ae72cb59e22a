// JSON Schema -> GBNF (grammar.h), for structured outputs. What is supported and what is refused
// is listed in docs/grammar.md; a keyword outside that list is an error naming it
// ("json_schema: keyword 'patternProperties' is not supported"), never silently ignored: a
// constraint that ignored a keyword would let through output the client's validator rejects.
#pragma once
#include <string>

#include "core/json.h"

namespace kvad::grammar {

// Properties are generated in the schema's order, so pass an OrderedJson where the order matters
// (the Json overload has its keys sorted by nlohmann). Errors: "json_schema: <where>: <what>".
std::string json_schema_to_gbnf(const OrderedJson& schema);
std::string json_schema_to_gbnf(const Json& schema);
// Any JSON object, with whitespace bounded as in the schema grammars.
std::string json_object_gbnf();

}  // namespace kvad::grammar
