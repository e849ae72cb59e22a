// Synthesized checkpoints: random weights in the real layout and shapes of an architecture, for
// tests and benchmarks (no Hub access needed). Same seed -> same bytes on every machine.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace kvad {

struct SynthOptions {
  std::string arch;    // llama | qwen2 | qwen3 | gpt2
  std::string preset;  // tiny | tiny-v512 | tiny-kq | smollm2-135m | qwen2.5-0.5b | qwen3-0.6b | llama-3.2-1b | gpt2
  std::string out;     // folder to write
  uint64_t seed = 0;
  DType dtype = DType::BF16;
  double std = 0.02;          // weights and biases ~ N(0, std)
  double norm_jitter = 0.0;   // norm weights 1 + N(0, j), LayerNorm biases N(0, j)
  uint64_t max_shard_bytes = 5'000'000'000;
};

struct SynthResult {
  std::string arch;       // the architecture written (SynthOptions::arch, or the preset's when that was empty)
  std::string tokenizer;  // tokenizer family the caller must write: qwen3 | llama3 | gpt2 | gpt2-trim49152
  int64_t parameters = 0;
  uint64_t bytes = 0;
  int shards = 1;
};

std::vector<std::string> synth_presets();
std::vector<std::string> synth_archs();
// Writes config.json, generation_config.json and the safetensors (sharded above max_shard_bytes).
SynthResult synthesize(const SynthOptions& opts);

}  // namespace kvad
