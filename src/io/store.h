// Where kvad keeps things: $KVAD_HOME (default $XDG_CACHE_HOME/kvad, else ~/.cache/kvad).
//   models/<NAME>/   models kvad trained or imported (HF layout: config.json, model.safetensors, ...;
//                    image pipelines: model_index.json and its part folders)
//   adapters/<NAME>/ LoRA adapters kvad train --lora made (PEFT layout: adapter_config.json, ...)
//   cache/           derived files such as quantised-weight caches
// Models downloaded from the Hub live in the Hugging Face cache ($HF_HOME/hub), shared with Python.
#pragma once
#include <optional>
#include <string>

namespace kvad {

std::string kvad_home();
std::string store_models_dir();
std::string store_cache_dir();
// The folder of a model in kvad's store, if NAME is one (a folder with config.json).
std::optional<std::string> find_in_store(const std::string& name);
// The same for an image pipeline (a folder with model_index.json).
std::optional<std::string> find_pipeline_in_store(const std::string& name);
std::string store_adapters_dir();
// The folder of an adapter in kvad's store, if NAME is one (a folder with adapter_config.json).
std::optional<std::string> find_adapter_in_store(const std::string& name);

}  // namespace kvad
