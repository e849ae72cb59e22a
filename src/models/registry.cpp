#include "models/registry.h"

#include "core/error.h"
#include "core/fs.h"
#include "io/gguf.h"
#include "io/safetensors.h"

namespace kvad {

const std::vector<Architecture>& architectures() {
  static const std::vector<Architecture> list = {
      {"LlamaForCausalLM", "llama", parse_llama_config, load_llama, {"rotary_emb.inv_freq"}},
      {"MistralForCausalLM", "mistral", parse_llama_config, load_llama, {"rotary_emb.inv_freq"}},
      {"Qwen2ForCausalLM", "qwen2", parse_llama_config, load_llama, {"rotary_emb.inv_freq"}},
      {"Qwen3ForCausalLM", "qwen3", parse_llama_config, load_llama, {"rotary_emb.inv_freq"}},
      // Old GPT-2 exports carry the causal-mask buffers attn.bias / attn.masked_bias.
      {"GPT2LMHeadModel", "gpt2", parse_gpt2_config, load_gpt2, {".attn.bias", ".attn.masked_bias"}},
  };
  return list;
}

const Architecture* find_architecture(const Json& config) {
  if (!config.is_object()) return nullptr;
  if (auto a = config.find("architectures"); a != config.end() && a->is_array())
    for (const Json& name : *a)
      if (name.is_string())
        for (const Architecture& arch : architectures())
          if (arch.name == name.get<std::string>()) return &arch;
  if (auto t = config.find("model_type"); t != config.end() && t->is_string())
    for (const Architecture& arch : architectures())
      if (arch.model_type == t->get<std::string>()) return &arch;
  return nullptr;
}

std::string supported_architectures() {
  std::string s;
  for (const Architecture& a : architectures()) s += (s.empty() ? "" : ", ") + a.name;
  return s;
}

const Architecture& require_architecture(const Json& config, const std::string& what) {
  if (const Architecture* a = find_architecture(config)) return *a;
  std::string named;
  if (config.is_object() && config.contains("architectures")) named = config["architectures"].dump();
  else if (config.is_object() && config.contains("model_type")) named = config["model_type"].dump();
  if (named.empty()) fail("{}: no 'architectures' or 'model_type' field; supported: {}", what, supported_architectures());
  fail("{}: unsupported architecture {}; supported: {}", what, named, supported_architectures());
}

std::unique_ptr<Model> load_model_dir(const std::string& dir, const LoadOptions& opts) {
  if (!is_directory(dir)) fail("{}: not a model folder (expected config.json, model.safetensors, tokenizer.json)", dir);
  std::string cfg_path = join_path(dir, "config.json");
  Json cfg = read_json_file(cfg_path);
  const Architecture& arch = require_architecture(cfg, cfg_path);
  ModelConfig config = arch.parse_config(cfg, cfg_path);
  check_kquant_widths(opts.format, {config.hidden, config.intermediate, config.q_dim()}, dir);
  auto ckpt = std::make_shared<SafetensorsCheckpoint>(dir);
  std::unique_ptr<Model> model = arch.load(config, *ckpt, opts);
  ckpt->check_all_read(arch.ignorable);
  model->hold(ckpt);
  return model;
}

bool is_gguf_path(const std::string& path) {
  return path.size() > 5 && path.compare(path.size() - 5, 5, ".gguf") == 0 && !is_directory(path);
}

std::unique_ptr<Model> load_model_gguf(const std::string& path, const LoadOptions& opts) {
  return load_model_gguf(std::make_shared<GgufCheckpoint>(path), opts);
}

std::unique_ptr<Model> load_model_gguf(std::shared_ptr<GgufCheckpoint> ckpt, const LoadOptions& opts) {
  Json cfg = gguf_model_config(*ckpt);
  const std::string& path = ckpt->description();
  std::string what = path + " (GGUF metadata)";
  const Architecture& arch = require_architecture(cfg, what);
  ModelConfig config = arch.parse_config(cfg, what);
  check_kquant_widths(opts.format, {config.hidden, config.intermediate, config.q_dim()}, path);
  std::unique_ptr<Model> model = arch.load(config, *ckpt, opts);
  ckpt->check_all_read(arch.ignorable);
  model->hold(ckpt);
  return model;
}

}  // namespace kvad
