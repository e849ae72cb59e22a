// THE registry of architectures. Each family's file (models/llama.cpp, models/gpt2.cpp) provides
// whole descriptors: config parser, loader, tensor table (models/tensors.h), GGUF description,
// synth presets. The CLI, the server, `kvad ls`, synth, the GGUF loader and any later backend ask
// it "can you run this?"; nothing keeps a copy of the answer.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/json.h"
#include "io/checkpoint.h"
#include "models/model.h"
#include "backend/weight.h"
#include "models/tensors.h"

namespace kvad {

class WeightSource;

struct LoadOptions {
  WeightFormat format = WeightFormat::AsStored;
  // Where the .nq cache of a quantised load lives ("" = no cache). Nothing is cached at f32/bf16.
  std::string cache_file;
  // Dense weights used in place from a file mapping (bf16/f32 as stored) are copied into huge
  // pages (Weight::copy_into_huge_pages), up to half the memory available, and a .nq cache is
  // read into huge pages rather than mapped. For loads whose weights the CPU computes with; a GPU
  // copies them to its own memory, and a host copy would only hold memory.
  bool copy_in_place_weights = false;
  // Called after each tensor a load from the checkpoint reads (not from a .nq cache), with how
  // many of the checkpoint's tensors are done: a first q8 load of a 7B model quantises for
  // minutes on 2 cores, and a terminal should see it move (the CLI draws it).
  WeightsProgress on_progress;
};

// What a load did, for the user: "quantised from the checkpoint and cached to X", "from cache X".
struct LoadReport {
  std::string note;
  bool from_cache = false;
};

// A shape synth can write for the family (models/synth.h): the keys of the real model's
// config.json that shape it, and the tokenizer family the caller writes next to it.
struct SynthPreset {
  std::string name;       // e.g. "tiny", "qwen2.5-0.5b"
  std::string tokenizer;  // qwen3 | llama3 | gpt2 | deepseek_v3 | gpt2-trim49152 | gpt2-trim512 | "" (none bundled)
  Json config;
};

// One line of a family's GGUF metadata -> config.json translation: "<arch>.<gguf>" -> "<hf>".
enum class GgufKeyKind {
  Count,  // an integer in 1 .. 2^31 (a per-layer array is refused)
  Float,
};
struct GgufConfigKey {
  const char* gguf;  // after "<arch>.", e.g. "attention.head_count"
  const char* hf;    // the config.json key, e.g. "num_attention_heads"
  GgufKeyKind kind;
  bool required;
};

// How a family reads llama.cpp's files of its GGUF architecture (models/gguf_model.h).
struct GgufDescription {
  std::string arch;                 // general.architecture, e.g. "qwen2"
  std::vector<GgufConfigKey> keys;  // the plain copies
  // What is not a plain copy: defaults, derived fields, checks, rope scaling. `arch` as above.
  void (*finish)(const GgufFile& f, const std::string& arch, Json& config) = nullptr;
  bool permuted_qk = false;  // llama.cpp's converter permuted the Q/K rows (TensorDecl::gguf_permuted_heads)
  // Tensors the metadata step reads (llama's rope_freqs.weight): they count as read.
  std::vector<std::string> metadata_tensors;
  // Tensors the family builds from others of the file (GgufCheckpoint::add_derived), once the
  // config is known; it reads (and so marks) the ones it consumes.
  void (*derive)(GgufCheckpoint& ck, const ModelConfig& config) = nullptr;
};

struct Architecture {
  std::string name;        // config.json "architectures"[0], e.g. "Qwen2ForCausalLM"
  std::string model_type;  // config.json "model_type", e.g. "qwen2"
  ModelConfig (*parse_config)(const Json& config, const std::string& what);
  std::unique_ptr<Model> (*load)(const ModelConfig& config, WeightSource& weights);
  // The family's tensor table for a config, without destinations: what the loader reads.
  TensorList (*tensors)(const ModelConfig& config);
  // Checkpoint tensors that are legitimately not read (buffers some exporters save).
  std::vector<std::string> ignorable;
  // Keys transformers writes into this architecture's config.json beyond the shape (synth writes them).
  Json config_defaults = Json::object();
  std::optional<GgufDescription> gguf;  // absent: no GGUF architecture of its own
  std::vector<SynthPreset> presets;
  // Runs on the GPU backend (src/vulkan/): every Backend call its forward makes is implemented there.
  bool gpu = false;
};

const std::vector<Architecture>& architectures();
// What the unread-tensor guard lets pass for a model: the architecture's buffers and the config's
// unused tensors.
std::vector<std::string> unread_allowed(const Architecture& arch, const ModelConfig& config);
// Finds the architecture of a config.json (by "architectures", then "model_type"), or nullptr.
const Architecture* find_architecture(const Json& config);
// Same, but throws an error listing the supported architectures.
const Architecture& require_architecture(const Json& config, const std::string& what);
std::string supported_architectures();

// Loads config.json + safetensors from a model folder (through the .nq cache for quantised
// formats when opts.cache_file is set); runs the unread-tensor guard.
std::unique_ptr<Model> load_model_dir(const std::string& dir, const LoadOptions& opts, LoadReport* report = nullptr);

// Loads a .gguf file: see models/gguf_model.h.
std::unique_ptr<Model> load_model_gguf(const std::string& path, const LoadOptions& opts);
std::unique_ptr<Model> load_model_gguf(std::shared_ptr<const GgufFile> file, const LoadOptions& opts);
bool is_gguf_path(const std::string& path);  // names a file ending in .gguf

// The families, one file each: every descriptor of the family (one per config.json architecture).
std::vector<Architecture> llama_family();
std::vector<Architecture> gpt2_family();
std::vector<Architecture> deepseek_family();
std::vector<Architecture> qwen3_next_family();

}  // namespace kvad
