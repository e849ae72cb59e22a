// Reading a diffusers pipeline folder (pipeline_config.h).
#include "image/pipeline_config.h"

#include <filesystem>

#include "core/error.h"
#include "core/fs.h"

namespace kvad::image {
namespace {

struct Need {
  const char* part;
  std::initializer_list<const char*> classes;  // the classes kvad reads for it
};

// The parts each pipeline needs and the classes accepted for them. The scheduler's class does not
// matter: the sampler chosen (Euler / Euler ancestral) reads its config, as diffusers' from_config.
const std::initializer_list<Need> kSd15 = {{"text_encoder", {"CLIPTextModel"}},
                                           {"tokenizer", {"CLIPTokenizer", "CLIPTokenizerFast"}},
                                           {"unet", {"UNet2DConditionModel"}},
                                           {"vae", {"AutoencoderKL"}},
                                           {"scheduler", {}}};
const std::initializer_list<Need> kSdxl = {{"text_encoder", {"CLIPTextModel"}},
                                           {"text_encoder_2", {"CLIPTextModelWithProjection"}},
                                           {"tokenizer", {"CLIPTokenizer", "CLIPTokenizerFast"}},
                                           {"tokenizer_2", {"CLIPTokenizer", "CLIPTokenizerFast"}},
                                           {"unet", {"UNet2DConditionModel"}},
                                           {"vae", {"AutoencoderKL"}},
                                           {"scheduler", {}}};

}  // namespace

const char* pipeline_kind_name(PipelineKind k) { return k == PipelineKind::SD15 ? "sd15" : "sdxl"; }

const PipelinePart& PipelineFolder::part(const std::string& name) const {
  auto it = parts.find(name);
  if (it == parts.end()) fail("{}: the pipeline has no '{}'", join_path(dir, "model_index.json"), name);
  return it->second;
}

PipelineFolder parse_model_index(const Json& j, const std::string& what, const std::string& dir) {
  if (!j.is_object()) fail("{}: must be a JSON object", what);
  PipelineFolder p;
  p.dir = dir;
  p.class_name = json_str_or(j, "_class_name", "", what);
  if (p.class_name == "StableDiffusionPipeline") {
    p.kind = PipelineKind::SD15;
  } else if (p.class_name == "StableDiffusionXLPipeline") {
    p.kind = PipelineKind::SDXL;
  } else {
    fail("{}: '_class_name' = '{}' is not a pipeline kvad runs (StableDiffusionPipeline, StableDiffusionXLPipeline)",
         what, p.class_name.empty() ? "(none)" : p.class_name);
  }
  p.force_zeros_for_empty_prompt = json_bool_or(j, "force_zeros_for_empty_prompt", true, what);
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key().empty() || it.key()[0] == '_' || !it->is_array()) continue;  // _class_name, flags
    const Json& v = *it;
    if (v.size() != 2) fail("{}: '{}' must be [library, class], not {}", what, it.key(), json_snippet(v));
    if (v[0].is_null() && v[1].is_null()) continue;  // a part this pipeline does without
    if (!v[0].is_string() || !v[1].is_string())
      fail("{}: '{}' must be [library, class] strings, not {}", what, it.key(), json_snippet(v));
    if (it.key().find('/') != std::string::npos || it.key() == "..")
      fail("{}: part name '{}' is not a plain folder name", what, it.key());
    p.parts[it.key()] = {it.key(), v[0].get<std::string>(), v[1].get<std::string>(), join_path(dir, it.key())};
  }
  for (const Need& n : p.kind == PipelineKind::SD15 ? kSd15 : kSdxl) {
    auto it = p.parts.find(n.part);
    if (it == p.parts.end()) fail("{}: a {} needs '{}', which is not listed", what, p.class_name, n.part);
    if (n.classes.size() == 0) continue;
    bool ok = false;
    std::string names;
    for (const char* c : n.classes) {
      ok = ok || it->second.class_name == c;
      names += names.empty() ? c : std::string(", ") + c;
    }
    if (!ok) fail("{}: '{}' is a {}, not one kvad reads ({})", what, n.part, it->second.class_name, names);
  }
  return p;
}

PipelineFolder read_pipeline_folder(const std::string& dir) {
  std::string index = join_path(dir, "model_index.json");
  if (!file_exists(index)) fail("{}: missing (a diffusers pipeline folder starts with model_index.json)", index);
  PipelineFolder p = parse_model_index(read_json_file(index), index, dir);
  for (const Need& n : p.kind == PipelineKind::SD15 ? kSd15 : kSdxl)
    if (!is_directory(p.part(n.part).dir))
      fail("{}: lists '{}', but the folder {} is missing", index, n.part, p.part(n.part).dir);
  return p;
}

std::unique_ptr<SafetensorsCheckpoint> open_part_weights(const std::string& part_dir) {
  // diffusers' names (and its variant naming: the .fp16 goes before .safetensors for a single
  // file, at the end of an index's name), plain before fp16, an index before a single file.
  static const std::pair<const char*, const char*> kNames[] = {
      {"model.safetensors", "model.safetensors.index.json"},
      {"diffusion_pytorch_model.safetensors", "diffusion_pytorch_model.safetensors.index.json"},
      {"model.fp16.safetensors", "model.safetensors.index.fp16.json"},
      {"diffusion_pytorch_model.fp16.safetensors", "diffusion_pytorch_model.safetensors.index.fp16.json"},
  };
  if (!is_directory(part_dir)) fail("{}: missing folder", part_dir);
  for (auto [single, index] : kNames)
    if (file_exists(join_path(part_dir, index)) || file_exists(join_path(part_dir, single)))
      return std::make_unique<SafetensorsCheckpoint>(part_dir, single, index);
  // Any other name: the folder's only .safetensors file.
  std::vector<std::string> found;
  bool has_bin = false;
  for (const auto& e : std::filesystem::directory_iterator(part_dir)) {
    std::string n = e.path().filename().string();
    if (n.size() > 12 && n.ends_with(".safetensors")) found.push_back(n);
    has_bin = has_bin || n.ends_with(".bin");
  }
  if (found.size() == 1) return std::make_unique<SafetensorsCheckpoint>(part_dir, found[0], found[0] + ".index.json");
  if (found.size() > 1)
    fail("{}: {} .safetensors files and no index json saying which belong together", part_dir, found.size());
  fail("{}: no weights (looked for model[.fp16].safetensors, diffusion_pytorch_model[.fp16].safetensors, their "
       "index json){}", part_dir, has_bin ? "; PyTorch .bin files are not read: convert them to safetensors" : "");
}

}  // namespace kvad::image
