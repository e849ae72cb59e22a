#include "models/registry.h"

#include "core/error.h"
#include "core/fs.h"
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>

#include "io/nq.h"
#include "io/safetensors.h"
#include "models/weight_source.h"

namespace kvad {

// An explicit list of families rather than self-registration from static initialisers: the
// families live in a static library, and the linker leaves out any object file nothing refers
// to, so a family that only registered itself from a static constructor would silently be
// missing from a binary (or a test) that never named it. Each family's file provides its whole
// descriptors (llama_family(), gpt2_family(), deepseek_family(), qwen3_next_family()); adding a family is one file and one line here.
const std::vector<Architecture>& architectures() {
  static const std::vector<Architecture> list = [] {
    std::vector<Architecture> all;
    for (auto family : {llama_family, gpt2_family, deepseek_family, qwen3_next_family})
      for (Architecture& a : family()) all.push_back(std::move(a));
    return all;
  }();
  return list;
}

std::vector<std::string> unread_allowed(const Architecture& arch, const ModelConfig& config) {
  std::vector<std::string> out = arch.ignorable;
  out.insert(out.end(), config.unused_tensors.begin(), config.unused_tensors.end());
  return out;
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
  if (config.is_object() && config.contains("architectures")) named = json_snippet(config["architectures"]);
  else if (config.is_object() && config.contains("model_type")) named = json_snippet(config["model_type"]);
  if (named.empty()) fail("{}: no 'architectures' or 'model_type' field; supported: {}", what, supported_architectures());
  fail("{}: unsupported architecture {}; supported: {}", what, named, supported_architectures());
}

// The stamp a cache file must carry to stand for this checkpoint in this format.
static Json cache_stamp(const SafetensorsCheckpoint& ck, WeightFormat fmt) {
  Json files = file_stamps(ck.files());
  return {{"layout", 1}, {"format", weight_format_name(fmt)}, {"files", files}, {"tensors", ck.names()}};
}

std::unique_ptr<Model> load_model_dir(const std::string& dir, const LoadOptions& opts, LoadReport* report) {
  if (!is_directory(dir)) fail("{}: not a model folder (expected config.json, model.safetensors, tokenizer.json)", dir);
  std::string cfg_path = join_path(dir, "config.json");
  Json cfg = read_json_file(cfg_path);
  const Architecture& arch = require_architecture(cfg, cfg_path);
  ModelConfig config = arch.parse_config(cfg, cfg_path);
  check_kquant_widths(opts.format, {config.hidden, config.intermediate, config.q_dim()}, dir);
  auto ckpt = std::make_shared<SafetensorsCheckpoint>(dir);
  LoadReport local;
  LoadReport& rep = report ? *report : local;
  rep = LoadReport{};
  bool quantised = opts.format == WeightFormat::Q8 || opts.format == WeightFormat::Q4;
  bool use_cache = quantised && !opts.cache_file.empty();
  Json stamp = use_cache ? cache_stamp(*ckpt, opts.format) : Json();
  if (use_cache && file_exists(opts.cache_file)) {
    try {
      auto nq = std::make_shared<NqCheckpoint>(opts.cache_file, stamp,
                                               opts.copy_in_place_weights ? Paging::HugePages : Paging::Mapped);
      WeightSource src(*nq, opts.format, false);
      std::unique_ptr<Model> model = arch.load(config, src);
      std::vector<std::string> allowed = unread_allowed(arch, config);
      // An FP8 checkpoint's scales went into its quantised matrices: the cache was written only
      // after the load that built it read every one of them (from these files: the stamp).
      if (config.fp8_blocks.any()) allowed.push_back("_scale_inv");
      nq->check_all_read(allowed);
      model->hold(nq);
      rep.from_cache = true;
      rep.note = "weights from cache " + opts.cache_file;
      return model;
    } catch (const Error& e) {  // stale or corrupt: never used, rebuilt below
      std::remove(opts.cache_file.c_str());
      rep.note = std::string("cache rebuilt (") + e.what() + "); ";
    }
  }
  WeightSource src(*ckpt, opts.format, use_cache, config.fp8_blocks);
  if (opts.copy_in_place_weights) src.copy_in_place_weights();
  if (opts.on_progress) src.report_progress(opts.on_progress);
  std::unique_ptr<Model> model = arch.load(config, src);
  ckpt->check_all_read(unread_allowed(arch, config));
  model->hold(ckpt);
  if (use_cache) {
    try {
      make_directories(std::filesystem::path(opts.cache_file).parent_path().string());
      src.write_cache(opts.cache_file, stamp);
      rep.note += std::string("quantised to ") + weight_format_name(opts.format) + ", cached to " + opts.cache_file;
    } catch (const Error& e) {  // a cache we cannot write costs speed next time, not this run
      rep.note += std::string("quantised to ") + weight_format_name(opts.format) + " (not cached: " + e.what() + ")";
    }
  }
  return model;
}

bool is_gguf_path(const std::string& path) {
  return path.size() > 5 && path.compare(path.size() - 5, 5, ".gguf") == 0 && !is_directory(path);
}

}  // namespace kvad
