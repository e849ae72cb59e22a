// Checkpoints in Hugging Face layout, so the engine loads what the trainer saves:
//   GPT-2  GPT2LMHeadModel: transformer.* names, Conv1D weights stored [in, out], head tied
//   Llama  LlamaForCausalLM: model.layers.* names, q/k/v and gate/up as separate [out, in] matrices
//          (Qwen2ForCausalLM with q/k/v biases, Qwen3ForCausalLM with q/k norms: a base's shapes)
// A checkpoint folder holds config.json, model.safetensors (f32), tokenizer.json,
// tokenizer_config.json and, for resuming, optimizer.safetensors (AdamW's moments) and
// trainer_state.json. Folders are written whole under a temporary name and swapped in with one
// rename, so a crash leaves the previous checkpoint or the new one, never a mix.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/json.h"
#include "train/model.h"

namespace kvad::train {

// One HF tensor as a view of the flat parameter buffer: `rows` x `cols` values from `offset`
// (a row slice of an internal matrix), stored transposed for GPT-2's Conv1D. cols = 0: a vector.
struct HfTensor {
  std::string name;
  int64_t offset, rows, cols;
  bool transpose;
  std::vector<int64_t> stored_shape() const;
};
std::vector<HfTensor> hf_tensors(const ModelShape& s, const ParamLayout& layout);
// Puts a stored tensor's values (f32, in its stored order: transposed for Conv1D) into params.
void copy_hf_tensor(const HfTensor& t, const float* stored, float* params);
// config.json for the shape; `extra` is stored under "kvad" (how it was trained).
Json hf_config(const ModelShape& s, const Json& extra);

struct CheckpointData {
  const ModelShape* shape = nullptr;
  const ParamLayout* layout = nullptr;
  const float* params = nullptr;
  std::vector<uint8_t> vocab;           // id -> byte (tokenizer.json)
  Json config_extra = Json::object();   // config.json "kvad"
  // For resuming (optional: absent in an exported model).
  const float *adam_m = nullptr, *adam_v = nullptr;
  Json state;  // trainer_state.json (null: not written)
};

// Writes the folder `dir` atomically (replacing an existing one).
void save_checkpoint(const std::string& dir, const CheckpointData& d);

struct LoadedCheckpoint {
  ModelShape shape;
  std::vector<float> params, adam_m, adam_v;
  std::vector<uint8_t> vocab;
  Json state;
};
// Reads a folder written by save_checkpoint with its optimiser state (for --resume).
LoadedCheckpoint load_checkpoint(const std::string& dir);

// Removes leftovers of interrupted saves of `dir` (temporary folders of processes that are gone).
void remove_stale_temporaries(const std::string& dir);

}  // namespace kvad::train
