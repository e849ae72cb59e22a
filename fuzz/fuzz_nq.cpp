// libFuzzer: arbitrary bytes as a .nq cache file must validate or fail with kvad::Error.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "io/nq.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    kvad::NqCheckpoint::validate(data, size, "fuzz");
  } catch (const kvad::Error&) {
  }
  return 0;
}
