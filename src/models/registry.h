// THE registry of architectures: name -> (config parser, loader). The CLI, the server, `kvad ls`
// and any later backend ask it "can you run this?"; nothing keeps a copy of the answer.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/json.h"
#include "io/checkpoint.h"
#include "models/model.h"
#include "backend/weight.h"

namespace kvad {

class WeightSource;

struct LoadOptions {
  WeightFormat format = WeightFormat::AsStored;
  // Where the .nq cache of a quantised load lives ("" = no cache). Nothing is cached at f32/bf16.
  std::string cache_file;
};

// What a load did, for the user: "quantised from the checkpoint and cached to X", "from cache X".
struct LoadReport {
  std::string note;
  bool from_cache = false;
};

struct Architecture {
  std::string name;        // config.json "architectures"[0], e.g. "Qwen2ForCausalLM"
  std::string model_type;  // config.json "model_type", e.g. "qwen2"
  ModelConfig (*parse_config)(const Json& config, const std::string& what);
  std::unique_ptr<Model> (*load)(const ModelConfig& config, WeightSource& weights);
  // Checkpoint tensors that are legitimately not read (buffers some exporters save).
  std::vector<std::string> ignorable;
};

const std::vector<Architecture>& architectures();
// Finds the architecture of a config.json (by "architectures", then "model_type"), or nullptr.
const Architecture* find_architecture(const Json& config);
// Same, but throws an error listing the supported architectures.
const Architecture& require_architecture(const Json& config, const std::string& what);
std::string supported_architectures();

// Loads config.json + safetensors from a model folder (through the .nq cache for quantised
// formats when opts.cache_file is set); runs the unread-tensor guard.
std::unique_ptr<Model> load_model_dir(const std::string& dir, const LoadOptions& opts, LoadReport* report = nullptr);

// Loads a .gguf file (llama, qwen2, qwen3, gpt2): its metadata as the config, its tensors under
// Hugging Face names (io/gguf.h), block formats as stored; runs the unread-tensor guard.
std::unique_ptr<Model> load_model_gguf(const std::string& path, const LoadOptions& opts);
class GgufCheckpoint;
std::unique_ptr<Model> load_model_gguf(std::shared_ptr<GgufCheckpoint> ckpt, const LoadOptions& opts);
bool is_gguf_path(const std::string& path);  // names a file ending in .gguf

// Family entry points (one file each).
ModelConfig parse_llama_config(const Json& config, const std::string& what);
std::unique_ptr<Model> load_llama(const ModelConfig& config, WeightSource& weights);
ModelConfig parse_gpt2_config(const Json& config, const std::string& what);
std::unique_ptr<Model> load_gpt2(const ModelConfig& config, WeightSource& weights);

}  // namespace kvad
