// The synth options a golden file records ({"preset", "seed", "std", "norm_jitter"}, bf16 as the
// golden scripts write it: tools/golden_synth.py), for tests that rebuild the checkpoint a golden
// was made from.
#pragma once
#include <string>

#include "core/json.h"
#include "models/synth.h"

namespace kvad::test {

inline SynthOptions golden_synth_options(const Json& s, const std::string& arch, const std::string& out) {
  SynthOptions o;
  o.arch = arch;
  o.preset = s["preset"];
  o.seed = s["seed"];
  o.std = s["std"];
  o.norm_jitter = s["norm_jitter"];
  o.dtype = DType::BF16;
  o.out = out;
  return o;
}

}  // namespace kvad::test
