// A tiny synthesized model of an architecture, f32 with weights ~ N(0, 0.1) and norm weights
// 1 + N(0, 0.1): large enough weights that a wrong operation moves the logits visibly. "tiny" has
// the family's real vocabulary (Qwen's 151,936 rows); "tiny-v512" the same layers over 512 tokens,
// for tests whose subject is the layers, where the head's 150k rows were most of the time.
#pragma once
#include <string>

#include "models/synth.h"
#include "test_support.h"

namespace kvad::test {

inline std::string synth_tiny(const std::string& arch, const std::string& tag, const std::string& preset = "tiny") {
  SynthOptions o;
  o.arch = arch;
  o.preset = preset;
  o.dtype = DType::F32;
  o.std = 0.1;
  o.norm_jitter = 0.1;
  o.out = temp_dir(tag + "-" + arch);
  synthesize(o);
  return o.out;
}

}  // namespace kvad::test
