// libFuzzer: arbitrary bytes as a model's config.json: parsed (bounded depth / memory), the
// architecture found, the family's parser and validate_config run. Every bad file is a
// kvad::Error naming the file; nothing aborts.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "models/config_parse.h"
#include "models/registry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    kvad::Json j = kvad::parse_json(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz/config.json");
    (void)kvad::architecture_field(j, "fuzz/config.json");
    const kvad::Architecture& a = kvad::require_architecture(j, "fuzz/config.json");
    a.parse_config(j, "fuzz/config.json");
  } catch (const kvad::Error&) {
  }
  return 0;
}
