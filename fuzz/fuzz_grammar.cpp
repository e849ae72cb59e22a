// libFuzzer: arbitrary text through the GBNF parser (bounded sizes, errors naming line and column
// without echoing the grammar), then whatever parses through the matcher for a few tokens.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "grammar/grammar.h"
#include "grammar_walk.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  kvad::grammar::GbnfLimits lim;
  lim.max_elements = 1 << 16;
  lim.max_rules = 1 << 12;
  try {
    kvad::grammar::Constraint c{std::make_shared<const kvad::grammar::Grammar>(kvad::grammar::parse_gbnf(text, lim))};
    kvad::fuzz::walk(c, data, size, 16);
  } catch (const kvad::Error& e) {
    if (std::string(e.what()).size() > 400) __builtin_trap();  // errors must not echo the input
  }
  return 0;
}
