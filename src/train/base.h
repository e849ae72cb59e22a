// A Hugging Face model folder as the frozen base of a fine-tune: config.json read into the
// trainer's ModelShape and the weights (f32, bf16 or f16, sharded or not) copied into its flat
// layout (fused q/k/v and gate/up, GPT-2's Conv1D transposed) through the same name map the
// trainer saves with (checkpoint.h: hf_tensors), so what loads is what the engine runs.
// Llama, Mistral, Qwen2 (q/k/v biases), Qwen3 (q/k norms) and GPT-2 bases; anything else is
// refused by name. With quant = "q8" every matrix is rounded through kvad's q8 blocks (the values
// `--quant q8` serves), so an adapter learns against the quantised weights it will run beside.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/json.h"
#include "train/model.h"

namespace kvad::train {

struct BaseModel {
  std::string dir;
  std::string architecture;  // config.json's, e.g. "Qwen2ForCausalLM"
  ModelShape shape;
  std::vector<float> params;  // make_layout(shape)
};

// The shape of a base from its config.json (`what` names the file in errors). context 0 = the
// base's own (max_position_embeddings / n_positions), capped at `max_context`.
ModelShape base_shape(const Json& config, const std::string& what, int64_t context, int64_t max_context,
                      std::string* architecture = nullptr);

// Reads the folder. quant: "" (as stored) or "q8".
BaseModel load_base_model(const std::string& dir, int64_t context, int64_t max_context, const std::string& quant);

}  // namespace kvad::train
