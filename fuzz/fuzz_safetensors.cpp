// libFuzzer: arbitrary bytes as a .safetensors file must parse or fail with kvad::Error, never crash.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto ts = kvad::SafetensorsFile::parse(data, size, "fuzz");
    volatile uint8_t sink = 0;
    for (auto& t : ts)
      if (t.nbytes) sink = sink + t.data[0] + t.data[t.nbytes - 1];  // every range must be readable
  } catch (const kvad::Error&) {
  }
  return 0;
}
