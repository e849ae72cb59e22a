// What kvad can run: the models in kvad's store, in the Hugging Face cache (kvad pull) and in the
// folders given to `kvad serve --models-dir`, each described from its files (config.json, safetensors headers) without loading
// weights: architecture, parameters, weight bytes, weight format, context length.
#pragma once
#include <string>
#include <vector>

#include "core/json.h"

namespace kvad::serve {

struct ModelEntry {
  std::string name;          // what to load it by (store name or folder path)
  std::string path;
  std::string source;        // "store" | "hf" | "folder"
  std::string architecture;  // config.json architectures[0] (or model_type)
  bool supported = false;    // the registry can run it
  int64_t parameters = 0;    // from the safetensors headers
  uint64_t bytes = 0;        // the weight files (not optimizer state beside them)
  std::string format;        // tensor dtypes, e.g. "bf16" or "bf16+f32"
  int64_t context_length = 0;
  bool chat = false;         // has a chat template
  std::string problem;       // why it can't be described/run, if so
};

// Describes one folder (never throws: problems go in `problem`).
ModelEntry describe_model(const std::string& dir, const std::string& name, const std::string& source);
// Store models, Hub models (each cached snapshot with a config.json), then each folder's sub-folders that hold a config.json (and the folder itself).
std::vector<ModelEntry> list_models(const std::vector<std::string>& dirs);
Json to_json(const ModelEntry& e);
// Removes a model from kvad's store (only from the store: folders given on the command line are
// the user's own and are never deleted). Throws HttpError.
void remove_from_store(const std::string& name);

}  // namespace kvad::serve
