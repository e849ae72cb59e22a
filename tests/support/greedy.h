// Generation options for tests that compare token streams: greedy (temperature 0, so the stream
// is a function of the model alone), at most `max_tokens` new tokens.
#pragma once
#include <cstdint>

#include "runtime/generate.h"

namespace kvad::test {

inline GenerateOptions greedy(int64_t max_tokens) {
  GenerateOptions g;
  g.sampling.temperature = 0;
  g.max_tokens = max_tokens;
  return g;
}

}  // namespace kvad::test
