// What a model folder is, read from its files without loading weights: architecture (and whether
// the registry runs it), parameters and dtypes from the safetensors headers (the shards the index
// names, not every file lying in the folder), context length from the family's own config parser,
// and whether it has a chat template. ONE description for `kvad ls` and the server's Models page.
#pragma once
#include <cstdint>
#include <string>

namespace kvad {

struct ModelFolderInfo {
  std::string architecture;  // config.json architectures[0] (or model_type); "" when unreadable
  bool supported = false;    // the registry can run it (and its config parses)
  // Why it cannot be described or run ("" when it can): "unreadable config.json", "invalid config",
  // "unsupported: NAME", "bad index", "incomplete (run kvad pull)", "unreadable safetensors",
  // "no .safetensors weights", "no tokenizer.json".
  std::string problem;
  int64_t parameters = 0;
  // Bytes of the weight shards only: a trained model's folder also holds the optimizer's state
  // (optimizer.safetensors, twice the weights), which is not part of the model.
  uint64_t weight_bytes = 0;
  std::string dtype;         // the dtype holding most parameters, e.g. "bf16"
  std::string dtypes;        // all of them, e.g. "bf16+f32"
  int64_t context_length = 0;
  bool chat = false;
};

// Never throws: what goes wrong is in `problem`.
ModelFolderInfo describe_model_folder(const std::string& dir);

}  // namespace kvad
