#include "models/synth.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/fs.h"
#include "core/json.h"
#include "core/rng.h"
#include "core/threads.h"
#include "io/safetensors.h"
#include "models/registry.h"

namespace kvad {

namespace {

// A preset of a registered architecture (the family's file declares both).
struct Preset {
  const Architecture* arch;
  const SynthPreset* preset;
};

std::vector<Preset> presets() {
  std::vector<Preset> list;
  for (const Architecture& a : architectures())
    for (const SynthPreset& p : a.presets) list.push_back({&a, &p});
  return list;
}

// config.json with the keys transformers writes for the architecture.
Json full_config(const Preset& p, DType dtype) {
  Json c = p.preset->config;
  c["architectures"] = {p.arch->name};
  c["model_type"] = p.arch->model_type;
  c["torch_dtype"] = dtype == DType::F32 ? "float32" : dtype == DType::F16 ? "float16" : "bfloat16";
  c["transformers_version"] = "4.51.0";
  c.update(p.arch->config_defaults);
  c["use_cache"] = true;
  return c;
}

// The tensors synth writes: the family's table for the config, less tied copies.
TensorList written_tensors(const Preset& p, const Json& config) {
  const Architecture& a = *p.arch;
  TensorList all = a.tensors(a.parse_config(config, "synth preset '" + p.preset->name + "'")), out;
  for (TensorDecl& d : all)
    if (d.tied_to.empty()) out.push_back(std::move(d));
  return out;
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return h;
}

// Values of one tensor: its own generator seeded from (seed, name), so the bytes do not depend on
// sharding or on the order tensors are written in.
std::string make_tensor(const TensorDecl& sp, const SynthOptions& o) {
  std::vector<float> v((size_t)sp.numel());
  uint64_t s = o.seed;
  Rng rng(Rng::splitmix(s) ^ fnv1a(sp.hf));
  double base = sp.init == TensorInit::One ? 1.0 : 0.0;
  double scale = sp.init == TensorInit::Normal ? o.std : o.norm_jitter;
  if (sp.init == TensorInit::Router) scale = 2.0 / std::sqrt((double)sp.shape.back());
  if (scale == 0) {
    for (float& x : v) x = (float)base;
  } else {
    for (float& x : v) x = (float)(base + scale * rng.normal());
  }
  std::string bytes;
  if (o.dtype == DType::F32) {
    bytes.assign((const char*)v.data(), v.size() * 4);
  } else {
    bytes.resize(v.size() * 2);
    uint16_t* d = reinterpret_cast<uint16_t*>(bytes.data());
    for (size_t i = 0; i < v.size(); i++) d[i] = o.dtype == DType::BF16 ? f32_to_bf16(v[i]) : f32_to_f16(v[i]);
  }
  return bytes;
}

}  // namespace

std::vector<std::string> synth_presets() {
  std::vector<std::string> out;
  for (const Preset& p : presets())
    if (std::find(out.begin(), out.end(), p.preset->name) == out.end()) out.push_back(p.preset->name);
  return out;
}

std::vector<std::string> synth_archs() {
  std::vector<std::string> out;
  for (const Architecture& a : architectures())
    if (!a.presets.empty()) out.push_back(a.model_type);
  return out;
}

namespace {

// The preset o names: its own architecture's when --arch is not given and only one family has it.
Preset find_preset(const SynthOptions& o) {
  std::string arch = o.arch, archs;
  for (const Preset& p : presets())
    if (p.preset->name == o.preset) archs += (archs.empty() ? "" : ", ") + p.arch->model_type;
  if (archs.empty()) fail("synth: unknown preset '{}'", o.preset);
  if (arch.empty() && archs.find(',') != std::string::npos)
    fail("synth: preset '{}' exists for several architectures ({}): give --arch", o.preset, archs);
  if (arch.empty()) arch = archs;
  for (const Preset& p : presets())
    if (p.preset->name == o.preset && p.arch->model_type == arch) return p;
  fail("synth: preset '{}' is a {} model, not '{}' (use --arch {})", o.preset, archs, o.arch, archs);
}

// Groups tensors into shards of at most max_bytes (a tensor never spans two).
std::vector<std::vector<size_t>> shard(const TensorList& tensors, uint64_t elem_bytes, uint64_t max_bytes) {
  std::vector<std::vector<size_t>> shards(1);
  uint64_t cur = 0;
  for (size_t i = 0; i < tensors.size(); i++) {
    uint64_t b = elem_bytes * (uint64_t)tensors[i].numel();
    if (cur > 0 && cur + b > max_bytes) {
      shards.emplace_back();
      cur = 0;
    }
    shards.back().push_back(i);
    cur += b;
  }
  return shards;
}

void write_shards(const SynthOptions& o, const TensorList& tensors, const std::vector<std::vector<size_t>>& shards,
                  uint64_t total_bytes) {
  Json weight_map = Json::object();
  for (size_t k = 0; k < shards.size(); k++) {
    std::string fname = shards.size() == 1 ? "model.safetensors"
                                           : fmt::format("model-{:05d}-of-{:05d}.safetensors", k + 1, shards.size());
    std::vector<TensorToWrite> tw;
    for (size_t i : shards[k]) {
      tw.push_back({tensors[i].hf, o.dtype, tensors[i].shape, {}});
      weight_map[tensors[i].hf] = fname;
    }
    write_safetensors(join_path(o.out, fname), tw, [&](size_t j) { return make_tensor(tensors[shards[k][j]], o); });
  }
  std::string index = join_path(o.out, "model.safetensors.index.json");
  if (shards.size() > 1) {
    Json idx = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
    atomic_write_file(index, idx.dump(2) + "\n");
  } else if (file_exists(index)) {
    std::remove(index.c_str());
  }
}

}  // namespace

SynthResult synthesize(const SynthOptions& o) {
  Preset preset = find_preset(o);
  if (o.dtype != DType::F32 && o.dtype != DType::BF16 && o.dtype != DType::F16)
    fail("synth: dtype must be f32, f16 or bf16");
  Json config = full_config(preset, o.dtype);
  TensorList tensors = written_tensors(preset, config);
  make_directories(o.out);
  atomic_write_file(join_path(o.out, "config.json"), config.dump(2) + "\n");
  Json gen = {{"bos_token_id", config["bos_token_id"]}, {"eos_token_id", config["eos_token_id"]},
              {"transformers_version", "4.51.0"}};
  atomic_write_file(join_path(o.out, "generation_config.json"), gen.dump(2) + "\n");

  SynthResult res;
  res.tokenizer = preset.preset->tokenizer;
  res.arch = preset.arch->model_type;
  res.parameters = parameter_count(tensors);
  res.bytes = (uint64_t)res.parameters * dtype_size(o.dtype);
  std::vector<std::vector<size_t>> shards = shard(tensors, dtype_size(o.dtype), o.max_shard_bytes);
  res.shards = (int)shards.size();
  write_shards(o, tensors, shards, res.bytes);
  return res;
}

}  // namespace kvad
