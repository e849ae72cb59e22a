#include "models/lora.h"

#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include <fmt/ranges.h>

#include "core/error.h"
#include "core/fs.h"
#include "io/gguf.h"
#include "io/safetensors.h"

namespace kvad {

float PeftConfig::scale() const { return (float)(rslora ? alpha / std::sqrt((double)rank) : alpha / (double)rank); }

PeftConfig parse_peft_config(const Json& j, const std::string& what) {
  if (!j.is_object()) fail("{}: not a JSON object", what);
  std::string type = json_str_or(j, "peft_type", "LORA", what);
  if (type != "LORA") fail("{}: peft_type is '{}'; kvad runs LORA adapters only", what, type);
  PeftConfig c;
  c.rank = json_int(j, "r", what);
  if (c.rank < 1 || c.rank > 4096) fail("{}: r = {} (the rank) must be 1 to 4096", what, c.rank);
  if (!j.contains("lora_alpha")) fail("{}: no lora_alpha (the adapter's scale is lora_alpha / r)", what);
  c.alpha = json_num_or(j, "lora_alpha", 0, what);
  if (!(c.alpha > 0) || !std::isfinite(c.alpha)) fail("{}: lora_alpha = {} must be a positive number", what, c.alpha);
  c.rslora = json_bool_or(j, "use_rslora", false, what);
  // The side path is (x A^T) B^T whichever way the base stores its matrix (PEFT transposes only
  // when merging into a Conv1D), so fan_in_fan_out is read for validation alone.
  c.fan_in_fan_out = json_bool_or(j, "fan_in_fan_out", false, what);
  if (json_bool_or(j, "use_dora", false, what)) fail("{}: use_dora = true: DoRA adapters are not supported", what);
  std::string bias = json_str_or(j, "bias", "none", what);
  if (bias != "none") fail("{}: bias = '{}': adapters that train biases are not supported (only \"none\")", what, bias);
  for (const char* key : {"modules_to_save", "layers_to_transform", "rank_pattern", "alpha_pattern"}) {
    auto it = j.find(key);
    if (it != j.end() && !it->is_null() && !it->empty())
      fail("{}: {} = {} is not supported (kvad applies one rank and alpha to every targeted projection)", what, key,
           json_snippet(*it));
  }
  auto t = j.find("target_modules");
  if (t == j.end() || t->is_null()) fail("{}: no target_modules", what);
  if (t->is_string()) {
    if (t->get<std::string>() != "all-linear")
      fail("{}: target_modules '{}': a regular expression is not supported (give a list, or \"all-linear\")", what,
           t->get<std::string>());
    c.all_linear = true;
    return c;
  }
  if (!t->is_array() || t->empty()) fail("{}: target_modules must be a non-empty list of module names", what);
  for (const Json& m : *t) {
    if (!m.is_string() || m.get<std::string>().empty()) fail("{}: target_modules holds {}, not a module name", what, json_snippet(m));
    c.targets.push_back(m.get<std::string>());
  }
  return c;
}

namespace {

// PEFT matches a target by the module name's last components ("q_proj" or "self_attn.q_proj").
bool covers(const std::string& target, const std::string& module) {
  return module == target || (module.size() > target.size() && module.ends_with("." + target) );
}

bool targeted(const PeftConfig& c, const std::string& module) {
  if (c.all_linear) return true;
  for (const std::string& t : c.targets)
    if (covers(t, module)) return true;
  return false;
}

// GPT2LMHeadModel names its modules "transformer.h.N..."; the original GPT-2 weights (GPT2Model) "h.N...".
std::string module_key(const std::string& m) { return m.starts_with("transformer.") ? m.substr(12) : m; }

std::string last_component(const std::string& m) { return m.substr(m.rfind('.') + 1); }

std::vector<float> finite_values(const TensorView& t) {
  std::vector<float> v = to_f32(t);
  for (size_t i = 0; i < v.size(); i++)
    if (!std::isfinite(v[i])) fail("{}: tensor '{}' holds {} at element {}: an adapter's weights must be finite", t.file, t.name, v[i], i);
  return v;
}

struct Halves {
  std::optional<TensorView> a, b;
};
using PairMap = std::map<const AdaptableMatrix*, Halves>;

void put(PairMap& pairs, const AdaptableMatrix* m, bool is_a, const TensorView& t) {
  std::optional<TensorView>& slot = is_a ? pairs[m].a : pairs[m].b;
  if (slot) fail("{}: tensor '{}' adapts '{}' a second time", t.file, t.name, m->module);
  slot = t;
}

// alpha / rank (alpha / sqrt(rank) with rsLoRA); llama.cpp's files without an alpha scale by 1.
struct ScaleRule {
  double alpha = 0;
  bool rslora = false;
  float of(int64_t rank) const {
    if (alpha == 0) return 1;
    return (float)(rslora ? alpha / std::sqrt((double)rank) : alpha / (double)rank);
  }
};

LoraPair make_pair(const AdaptableMatrix& m, const TensorView& a, const TensorView& b, int64_t want_rank, ScaleRule rule) {
  const int64_t in = m.weight->cols(), out = m.weight->rows();
  if (a.shape.size() != 2 || a.dim(1) != in)
    fail("{}: tensor '{}' is [{}] but '{}' takes {} inputs: lora_A must be [rank, {}] (an adapter for another base?)",
         a.file, a.name, fmt::join(a.shape, ", "), m.module, in, in);
  if (b.shape.size() != 2 || b.dim(0) != out)
    fail("{}: tensor '{}' is [{}] but '{}' has {} outputs: lora_B must be [{}, rank] (an adapter for another base?)",
         b.file, b.name, fmt::join(b.shape, ", "), m.module, out, out);
  const int64_t r = a.dim(0);
  if (b.dim(1) != r) fail("{}: rank mismatch for '{}': lora_A has rank {} and lora_B {}", a.file, m.module, r, b.dim(1));
  if (r < 1) fail("{}: tensor '{}' has rank 0", a.file, a.name);
  if (want_rank && r != want_rank)
    fail("{}: rank mismatch: tensor '{}' has rank {} but adapter_config.json says r = {}", a.file, a.name, r, want_rank);
  std::vector<float> bv = finite_values(b), bt(bv.size());
  for (int64_t o = 0; o < out; o++)
    for (int64_t j = 0; j < r; j++) bt[(size_t)(j * out + o)] = bv[(size_t)(o * r + j)];
  // Beside a rounded base the pair is held at bf16 too (backend/lora.h): measured in docs/lora.md.
  const bool f32 = m.weight->is_f32();
  LoraPair p;
  p.a = Weight::from_f32(finite_values(a), r, in, f32 ? WeightFormat::F32 : WeightFormat::BF16);
  if (f32) {
    p.bt = std::move(bt);
  } else {
    p.bt_bf16.resize(bt.size());
    for (size_t i = 0; i < bt.size(); i++) p.bt_bf16[i] = f32_to_bf16(bt[i]);
  }
  p.out = out, p.scale = rule.of(r);
  return p;
}

std::shared_ptr<const LoraAdapter> assemble(const std::string& path, const PairMap& pairs, int64_t want_rank,
                                            ScaleRule rule) {
  if (pairs.empty()) fail("{}: the adapter holds no lora_A / lora_B tensors", path);
  auto adapter = std::make_shared<LoraAdapter>(path);
  for (const auto& [m, h] : pairs) {
    if (!h.a || !h.b) fail("{}: '{}' has {} but no {}", path, m->module, h.a ? "lora_A" : "lora_B", h.a ? "lora_B" : "lora_A");
    adapter->add(m->weight, make_pair(*m, *h.a, *h.b, want_rank, rule), m->module);
  }
  return adapter;
}

// "base_model.model.<module>.lora_A.weight" -> (module, is_a); anything else is refused by name.
std::pair<std::string, bool> peft_name(const TensorView& t) {
  const std::string pre = "base_model.model.", a = ".lora_A.weight", b = ".lora_B.weight";
  bool is_a = t.name.ends_with(a), is_b = t.name.ends_with(b);
  if (!t.name.starts_with(pre) || (!is_a && !is_b))
    fail("{}: tensor '{}' is not a LoRA weight kvad runs (base_model.model.<module>.lora_A.weight / lora_B.weight; "
         "embedding adapters, DoRA magnitudes and saved modules are not supported)", t.file, t.name);
  return {t.name.substr(pre.size(), t.name.size() - pre.size() - a.size()), is_a};
}

// Every target must name a kind of projection the base has: a typo is an error, not a no-op.
void check_targets(const PeftConfig& c, const Model& model, const std::string& what) {
  std::set<std::string> kinds;
  for (const AdaptableMatrix& m : model.adaptable()) kinds.insert(last_component(m.module));
  for (const std::string& t : c.targets) {
    bool any = false;
    for (const AdaptableMatrix& m : model.adaptable()) any = any || covers(t, m.module);
    if (!any)
      fail("{}: target module '{}' is not a projection of this {} model (its projections: {})", what, t,
           model.config().model_type, fmt::join(kinds, ", "));
  }
}

std::shared_ptr<const LoraAdapter> load_peft(const std::string& dir, const Model& model) {
  const std::string cfg_path = dir + "/adapter_config.json", st_path = dir + "/adapter_model.safetensors";
  if (!file_exists(cfg_path))
    fail("{}: no adapter_config.json (a LoRA adapter is a PEFT folder with adapter_config.json and "
         "adapter_model.safetensors, or a llama.cpp LoRA .gguf)", dir);
  if (!file_exists(st_path))
    fail("{}: no adapter_model.safetensors{}", dir,
         file_exists(dir + "/adapter_model.bin") ? " (adapter_model.bin is a pickle kvad does not read: save with safe_serialization=True)" : "");
  PeftConfig c = parse_peft_config(read_json_file(cfg_path), cfg_path);
  check_targets(c, model, cfg_path);
  std::unordered_map<std::string, const AdaptableMatrix*> by_module;
  for (const AdaptableMatrix& m : model.adaptable()) by_module[module_key(m.module)] = &m;
  SafetensorsFile file(st_path);
  PairMap pairs;
  for (const TensorView& t : file.tensors()) {
    auto [module, is_a] = peft_name(t);
    auto it = by_module.find(module_key(module));
    if (it == by_module.end())
      fail("{}: tensor '{}' adapts '{}', which is not a projection of this {} model (an adapter for another base?)",
           st_path, t.name, module, model.config().model_type);
    if (!targeted(c, it->second->module))
      fail("{}: tensor '{}' adapts '{}', which target_modules does not name", st_path, t.name, module);
    put(pairs, it->second, is_a, t);
  }
  for (const AdaptableMatrix& m : model.adaptable())
    if (targeted(c, m.module) && !pairs.count(&m))
      fail("{}: no lora_A / lora_B for '{}', which target_modules covers", st_path, m.module);
  return assemble(dir, pairs, c.rank, {c.alpha, c.rslora});
}

std::shared_ptr<const LoraAdapter> load_gguf_lora(const std::string& path, const Model& model) {
  auto file = std::make_shared<const GgufFile>(path);
  std::string type = file->get_string("general.type").value_or(""), kind = file->get_string("adapter.type").value_or("");
  if (type != "adapter") fail("{}: general.type is '{}', not 'adapter': this GGUF is not a LoRA adapter", path, type);
  if (kind != "lora") fail("{}: adapter.type is '{}'; kvad runs 'lora' adapters", path, kind);
  std::string arch = file->get_string("general.architecture").value_or(""), base = model.config().model_type;
  if (arch != base && !(arch == "llama" && base == "mistral"))
    fail("{}: an adapter for a {} model cannot run on this {} model", path, arch, base);
  double alpha = file->get_float("adapter.lora.alpha").value_or(0);
  if (!(alpha >= 0) || !std::isfinite(alpha)) fail("{}: adapter.lora.alpha = {} must be 0 or positive", path, alpha);
  // llama.cpp's llama converter permutes Q/K rows per head, and so the rows of their B.
  GgufNameMap names;
  std::unordered_map<std::string, const AdaptableMatrix*> by_gguf;
  for (const AdaptableMatrix& m : model.adaptable()) {
    by_gguf[m.gguf] = &m;
    if (arch == "llama" && m.gguf_permuted_heads) names[m.gguf + ".lora_b"] = {m.gguf + ".lora_b", false, m.gguf_permuted_heads, {}};
  }
  GgufCheckpoint ck(file, names);
  PairMap pairs;
  for (const std::string& name : ck.names()) {
    bool is_a = name.ends_with(".lora_a"), is_b = name.ends_with(".lora_b");
    if (!is_a && !is_b) fail("{}: tensor '{}' is not a LoRA weight (<tensor>.lora_a / .lora_b)", path, name);
    auto it = by_gguf.find(name.substr(0, name.size() - 7));
    if (it == by_gguf.end())
      fail("{}: tensor '{}' adapts a tensor this {} model does not have as a projection (an adapter for another base?)",
           path, name, base);
    put(pairs, it->second, is_a, ck.get(name));
  }
  return assemble(path, pairs, 0, {alpha, false});
}

}  // namespace

std::shared_ptr<const LoraAdapter> load_lora(const std::string& path, const Model& model) {
  if (path.ends_with(".gguf")) return load_gguf_lora(path, model);
  if (path.ends_with("/adapter_config.json")) return load_peft(path.substr(0, path.size() - 20), model);
  if (!is_directory(path)) fail("{}: no such LoRA adapter (a PEFT folder or a .gguf file)", path);
  return load_peft(path, model);
}

}  // namespace kvad
