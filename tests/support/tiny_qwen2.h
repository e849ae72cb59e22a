// The tiny synthesized Qwen2 (f32, std 0.1) with the Qwen3 tokenizer fixture that the runtime tests
// share: synthesized and loaded once per test process.
#pragma once
#include <filesystem>
#include <string>

#include "models/synth.h"
#include "runtime/loader.h"
#include "test_support.h"

namespace kvad::test {

inline const LoadedModel& tiny_qwen2() {
  static LoadedModel m = [] {
    SynthOptions o;
    o.arch = "qwen2";
    o.preset = "tiny";
    o.std = 0.1;
    o.dtype = DType::F32;
    o.out = temp_dir("tiny-qwen2");
    synthesize(o);
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
      std::filesystem::copy_file(source_path(std::string("tests/fixtures/tokenizers/qwen3/") + f), o.out + "/" + f);
    return load_model(o.out, {});
  }();
  return m;
}

}  // namespace kvad::test
