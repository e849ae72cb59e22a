// libFuzzer: arbitrary bytes as a JSON Schema (parsed the way the server will parse a request),
// compiled to a grammar (refusing what it does not support, by name), then through the matcher.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "core/json.h"
#include "grammar_walk.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    kvad::OrderedJson schema = kvad::parse_ordered_json(text, "fuzz", {32, 1 << 16, 0});
    kvad::grammar::Constraint c = kvad::grammar::compile_json_schema(schema);
    kvad::fuzz::walk(c, data, size, 24);
  } catch (const kvad::Error& e) {
    if (std::string(e.what()).size() > 400) __builtin_trap();  // errors must not echo the input
  }
  return 0;
}
