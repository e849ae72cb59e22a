#include "models/gguf_model.h"

#include "core/error.h"
#include "models/weight_source.h"

namespace kvad {

const Architecture* find_gguf_architecture(const std::string& gguf_arch) {
  for (const Architecture& a : architectures())
    if (a.gguf && a.gguf->arch == gguf_arch) return &a;
  return nullptr;
}

std::string supported_gguf_architectures() {
  std::string s;
  for (const Architecture& a : architectures())
    if (a.gguf) s += (s.empty() ? "" : ", ") + a.gguf->arch;
  return s;
}

int64_t gguf_count(const GgufFile& f, const std::string& key) {
  const GgufValue* v = f.find(key);
  if (!v) fail("{}: missing metadata '{}'", f.what(), key);
  if (v->type == GgufType::ARRAY) fail("{}: per-layer '{}' (an array) is not supported", f.what(), key);
  int64_t x = f.get_int(key).value();
  if (x <= 0 || x > ((int64_t)1 << 31)) fail("{}: metadata '{}' = {} is out of range", f.what(), key, x);
  return x;
}

std::optional<int64_t> gguf_optional_count(const GgufFile& f, const std::string& key) {
  if (!f.find(key)) return std::nullopt;
  return gguf_count(f, key);
}

namespace {

// eos/eot/eom ids of the tokenizer, when they are valid ids.
void add_special_ids(const GgufFile& f, Json& cfg) {
  auto id = [&](const char* key) -> std::optional<int64_t> {
    auto v = f.get_int(key);
    if (!v || *v < 0 || *v > INT32_MAX) return std::nullopt;
    return v;
  };
  if (auto b = id("tokenizer.ggml.bos_token_id")) cfg["bos_token_id"] = *b;
  Json eos = Json::array();
  for (const char* k : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"})
    if (auto e = id(k)) eos.push_back(*e);
  if (!eos.empty()) cfg["eos_token_id"] = eos;
}

void copy_key(const GgufFile& f, const std::string& arch, const GgufConfigKey& k, Json& cfg) {
  std::string key = arch + "." + k.gguf;
  if (!k.required && !f.find(key)) return;
  if (k.kind == GgufKeyKind::Count) {
    cfg[k.hf] = gguf_count(f, key);
    return;
  }
  auto x = f.get_float(key);
  if (!x) fail("{}: missing metadata '{}'", f.what(), key);
  cfg[k.hf] = *x;
}

const Architecture& require_gguf_architecture(const GgufFile& f) {
  std::string arch = f.get_string("general.architecture").value_or("");
  if (arch.empty()) fail("{}: no general.architecture in the GGUF metadata", f.what());
  if (const Architecture* a = find_gguf_architecture(arch)) return *a;
  fail("{}: GGUF architecture '{}' is not supported (supported: {})", f.what(), arch, supported_gguf_architectures());
}

Json gguf_model_config(const Architecture& a, const GgufFile& f) {
  Json c = Json::object();
  const GgufTensorInfo* emb = f.tensor("token_embd.weight");
  if (!emb || emb->ne.size() != 2) fail("{}: no 2-D token_embd.weight tensor", f.what());
  c["architectures"] = {a.name};
  c["model_type"] = a.model_type;
  c["vocab_size"] = emb->ne[1];
  add_special_ids(f, c);
  for (const GgufConfigKey& k : a.gguf->keys) copy_key(f, a.gguf->arch, k, c);
  if (a.gguf->finish) a.gguf->finish(f, a.gguf->arch, c);
  return c;
}

}  // namespace

Json gguf_model_config(const GgufFile& f) { return gguf_model_config(require_gguf_architecture(f), f); }

std::shared_ptr<GgufCheckpoint> gguf_checkpoint(std::shared_ptr<const GgufFile> file, const Architecture& arch,
                                                const ModelConfig& config) {
  auto ck = std::make_shared<GgufCheckpoint>(std::move(file), gguf_name_map(arch.tensors(config), arch.gguf->permuted_qk));
  for (const std::string& name : arch.gguf->metadata_tensors)
    if (ck->has(name)) ck->get(name);
  if (arch.gguf->derive) arch.gguf->derive(*ck, config);
  return ck;
}

std::unique_ptr<Model> load_model_gguf(const std::string& path, const LoadOptions& opts) {
  return load_model_gguf(std::make_shared<GgufFile>(path), opts);
}

std::unique_ptr<Model> load_model_gguf(std::shared_ptr<const GgufFile> file, const LoadOptions& opts) {
  const Architecture& arch = require_gguf_architecture(*file);
  std::string what = file->what() + " (GGUF metadata)";
  ModelConfig config = arch.parse_config(gguf_model_config(arch, *file), what);
  check_kquant_widths(opts.format, {config.hidden, config.intermediate, config.q_dim()}, file->what());
  std::shared_ptr<GgufCheckpoint> ck = gguf_checkpoint(std::move(file), arch, config);
  WeightSource src(*ck, opts.format, false);
  if (opts.copy_in_place_weights) src.copy_in_place_weights();
  if (opts.on_progress) src.report_progress(opts.on_progress);
  std::unique_ptr<Model> model = arch.load(config, src);
  ck->check_all_read(unread_allowed(arch, config));
  model->hold(ck);
  return model;
}

}  // namespace kvad
