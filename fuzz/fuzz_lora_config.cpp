// libFuzzer: arbitrary bytes as a PEFT adapter_config.json: parsed with the JSON limits, then
// parse_peft_config (models/lora.h) reads r, lora_alpha, target_modules and the flags. Every bad
// file is a kvad::Error naming it; nothing aborts. The request side of adapters (a `lora` list,
// POST /lora-adapters) is in fuzz_serve_request.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "models/lora.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    kvad::Json j = kvad::parse_json(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz/adapter_config.json");
    kvad::PeftConfig c = kvad::parse_peft_config(j, "fuzz/adapter_config.json");
    (void)c.scale();
  } catch (const kvad::Error&) {
  }
  return 0;
}
