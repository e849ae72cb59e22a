#include "train/base.h"

#include <algorithm>
#include <cstring>

#include "backend/weight.h"
#include "core/error.h"
#include "core/fs.h"
#include "io/safetensors.h"
#include "models/registry.h"
#include "models/rope.h"
#include "train/checkpoint.h"

namespace kvad::train {

namespace {

// The families the trainer's layers compute; every other feature of a config is refused by name
// rather than trained as something it is not.
void check_trainable(const ModelConfig& c, const std::string& what) {
  const std::string& t = c.model_type;
  if (t != "gpt2" && t != "llama" && t != "mistral" && t != "qwen2" && t != "qwen3")
    fail("{}: {} ({}) cannot be a fine-tuning base yet: kvad train --lora takes Llama, Mistral, Qwen2, Qwen3 and "
         "GPT-2 models",
         what, c.architecture, t);
  auto refuse = [&](bool has, const char* feature) {
    if (has) fail("{}: this {} model has {}, which the trainer's layers do not compute", what, t, feature);
  };
  refuse(c.moe.n_experts > 0, "mixture-of-experts layers");
  refuse(c.mla.enabled(), "latent attention");
  refuse(c.delta.enabled(), "linear-attention layers");
  const std::string& rs = c.rope_scaling.type;
  refuse(!rs.empty() && rs != "llama3" && rs != "linear", fmt::format("rope scaling '{}'", rs).c_str());
  if (t != "gpt2") {  // GPT-2 has every bias, and the trainer computes them all
    refuse(c.o_bias, "an o_proj bias (attention_bias)");
    refuse(c.mlp_bias, "MLP biases (mlp_bias)");
    refuse(c.qkv_bias && t == "qwen3", "q/k/v biases beside q/k norms");
  }
  refuse(c.rotary_dims != 0 && c.rotary_dims != c.head_dim, "partial rotary embeddings");
  refuse(c.fp8_blocks.any(), "FP8 weights (dequantise them to bf16 first)");
}

// GPT-2 checkpoints come with and without the "transformer." prefix (OpenAI's have none).
std::string stored_name(const Checkpoint& ck, const std::string& name) {
  const std::string prefix = "transformer.";
  if (name.rfind(prefix, 0) == 0 && !ck.has(name) && ck.has(name.substr(prefix.size())))
    return name.substr(prefix.size());
  return name;
}

}  // namespace

ModelShape base_shape(const Json& config, const std::string& what, int64_t context, int64_t max_context,
                      std::string* architecture) {
  const Architecture& arch = require_architecture(config, what);
  ModelConfig c = arch.parse_config(config, what);
  check_trainable(c, what);
  if (architecture) *architecture = c.architecture;
  ModelShape s;
  s.arch = c.model_type == "gpt2" ? Arch::Gpt2 : Arch::Llama;
  s.vocab = c.vocab_size, s.layers = c.n_layers, s.dim = c.hidden, s.heads = c.n_heads, s.kv_heads = c.n_kv_heads;
  s.ffn = c.intermediate, s.tied = c.tie_embeddings, s.norm_eps = c.norm_eps, s.rope_theta = c.rope_theta;
  s.head_size = c.head_dim == c.hidden / c.n_heads ? 0 : c.head_dim;
  s.qkv_bias = s.arch == Arch::Llama && c.qkv_bias;
  s.qk_norm = c.qk_norm;
  if (s.arch == Arch::Llama && !c.rope_scaling.type.empty()) s.rope_inv_freq = rope_inv_freq(c, c.head_dim);
  if (context < 0) fail("--context must be positive");
  s.context = context > 0 ? context : std::min(c.max_positions, max_context);
  if (s.context > c.max_positions)
    fail("--context {} is longer than {} allows ({} positions)", s.context, what, c.max_positions);
  if (s.arch == Arch::Gpt2) s.positions = c.max_positions;
  s.finalize();
  return s;
}

BaseModel load_base_model(const std::string& dir, int64_t context, int64_t max_context, const std::string& quant) {
  if (quant != "" && quant != "q8") fail("--base-quant {}: the trainer rounds a base through q8 only", quant);
  const std::string config_path = join_path(dir, "config.json");
  if (!file_exists(config_path))
    fail("{}: no config.json (a fine-tuning base is a Hugging Face model folder; GGUF files are not read here)", dir);
  Json config = read_json_file(config_path);
  BaseModel b;
  b.dir = dir;
  b.shape = base_shape(config, config_path, context, max_context, &b.architecture);
  const Architecture& arch = require_architecture(config, config_path);
  ModelConfig parsed = arch.parse_config(config, config_path);

  ParamLayout layout = make_layout(b.shape);
  b.params.assign((size_t)layout.total, 0.0f);
  SafetensorsCheckpoint ck(dir);
  for (const HfTensor& t : hf_tensors(b.shape, layout)) {
    TensorView v = ck.get(stored_name(ck, t.name), t.stored_shape());
    std::vector<float> values = to_f32(v);
    copy_hf_tensor(t, values.data(), b.params.data());
  }
  // A tied model's checkpoint may save the head anyway; the engine checks it equals the embedding.
  if (b.shape.tied && ck.has("lm_head.weight")) ck.get("lm_head.weight");
  ck.check_all_read(unread_allowed(arch, parsed));

  if (quant == "q8")  // every matrix as `--quant q8` holds it; vectors (norms, biases) stay f32
    for (const HfTensor& t : hf_tensors(b.shape, layout)) {
      if (t.cols == 0) continue;
      float* w = b.params.data() + t.offset;
      Weight q = Weight::from_f32(std::vector<float>(w, w + t.rows * t.cols), t.rows, t.cols, WeightFormat::Q8);
      for (int64_t r = 0; r < t.rows; r++) q.row(r, w + r * t.cols);
    }
  return b;
}

}  // namespace kvad::train
