// libFuzzer: arbitrary bytes through kvad's one JSON entry point (parse_json / parse_ordered_json:
// bounded depth, size and memory; errors that name the place without echoing the input), and
// json_snippet on whatever parses, which must stay short and never recurse.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "core/json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    kvad::Json j = kvad::parse_json(text, "fuzz", {64, 1 << 20, 0});
    if (kvad::json_snippet(j, 40).size() > 40 + 3 + 4) std::abort();
  } catch (const kvad::Error& e) {
    if (std::string(e.what()).size() > 800) std::abort();  // an error must not echo the input
  }
  try {
    kvad::OrderedJson j = kvad::parse_ordered_json(text, "fuzz", {16, 1 << 20, 0});
    (void)kvad::json_snippet(j, 10);
  } catch (const kvad::Error&) {
  }
  return 0;
}
