// The three ways a request asks for a constraint, compiled once per request.
#include "core/error.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"

namespace kvad::grammar {

Constraint compile_gbnf(std::string_view text) { return {std::make_shared<const Grammar>(parse_gbnf(text))}; }

namespace {

template <typename J>
Constraint compile_schema(const J& schema) {
  std::string gbnf;
  try {
    gbnf = json_schema_to_gbnf(schema);
  } catch (const nlohmann::json::exception& e) {  // dump() of a value nlohmann cannot write
    fail("json_schema: {}", e.what());
  }
  try {
    return compile_gbnf(gbnf);
  } catch (const Error& e) {  // the schema is within limits but its grammar is not
    fail("json_schema: the schema's grammar is too large ({})", e.what());
  }
}

}  // namespace

Constraint compile_json_schema(const OrderedJson& schema) { return compile_schema(schema); }
Constraint compile_json_schema(const Json& schema) { return compile_schema(schema); }

Constraint json_object() {
  static const Constraint c = compile_gbnf(json_object_gbnf());
  return c;
}

}  // namespace kvad::grammar
