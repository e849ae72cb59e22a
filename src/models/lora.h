// Loading a LoRA adapter for a loaded model (backend/lora.h holds what is loaded, and the backend
// applies it). Two formats:
//   - a PEFT folder: adapter_config.json (r, lora_alpha, target_modules, use_rslora,
//     fan_in_fan_out) + adapter_model.safetensors with
//     base_model.model.<module>.lora_A.weight [r, in] / .lora_B.weight [out, r];
//   - a llama.cpp LoRA GGUF (general.type "adapter", adapter.type "lora", adapter.lora.alpha)
//     with <base tensor>.lora_a / .lora_b in the same layouts (ggml order reversed).
// Everything is checked against the base before the adapter is used: every tensor must name a
// projection of the base (the tensor table's names) that target_modules covers, with A and B of
// the config's rank whose widths fit that projection and hold finite values; every target must
// be a kind of projection the base has, and every projection it covers must be adapted. A failure
// is an error naming the file and tensor.
#pragma once
#include <memory>
#include <string>

#include "backend/lora.h"
#include "core/json.h"
#include "models/model.h"

namespace kvad {

// `path`: a PEFT folder (or its adapter_config.json) or a .gguf file.
std::shared_ptr<const LoraAdapter> load_lora(const std::string& path, const Model& model);

// What adapter_config.json says (exposed for the fuzz target; `what` names the file).
struct PeftConfig {
  int64_t rank = 0;
  double alpha = 0;
  bool rslora = false, fan_in_fan_out = false;
  bool all_linear = false;               // target_modules: "all-linear"
  std::vector<std::string> targets;      // otherwise: module names, matched as PEFT does (by suffix)
  float scale() const;                   // alpha / r, or alpha / sqrt(r)
};
PeftConfig parse_peft_config(const Json& j, const std::string& what);

}  // namespace kvad
