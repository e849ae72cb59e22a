#include "runtime/image_model.h"

#include <filesystem>

#include "core/error.h"
#include "core/fs.h"
#include "image/model_info.h"
#include "io/hub.h"
#include "io/store.h"

namespace kvad {

namespace {

bool ends_with(const std::string& s, const std::string& e) { return s.size() >= e.size() && s.compare(s.size() - e.size(), e.size(), e) == 0; }

std::string last_name(const std::string& p) {
  std::filesystem::path fp(p);
  std::string n = fp.filename().string();
  return n.empty() ? fp.parent_path().filename().string() : n;
}

ImageModelRef folder_ref(const std::string& dir, const std::string& what) {
  if (!image::is_pipeline_folder(dir))
    fail("{}: {} has no model_index.json, so it is not a diffusers pipeline (a text model? run it with kvad run)", what, dir);
  return {dir, false, last_name(dir)};
}

}  // namespace

ImageModelRef resolve_image_model(const std::string& name) {
  if (is_directory(name)) return folder_ref(name, name);
  if (file_exists(name)) {
    if (!ends_with(name, ".safetensors"))
      fail("{}: an image model is a diffusers folder (model_index.json) or a single-file .safetensors checkpoint", name);
    return {name, true, last_name(name)};
  }
  if (auto dir = find_pipeline_in_store(name)) return folder_ref(*dir, name);
  if (auto dir = find_in_store(name)) return folder_ref(*dir, name);  // a text model: said so
  if (hf::looks_like_repo_ref(name)) {
    hf::RepoRef ref = hf::parse_repo_ref(name);
    std::string cache = hf::hub_cache_dir();
    auto c = hf::find_cached(cache, ref);
    if (!c)
      fail("{}: not downloaded (not a folder, not in kvad's store, not in the Hugging Face cache {}); run `kvad pull {}`",
           name, cache, ref.str());
    if (!ref.file.empty()) {
      if (c->files.empty() || !c->missing.empty())
        fail("{}: not downloaded (the Hugging Face cache {} has {} but not this file); run `kvad pull {}`", name, cache,
             ref.repo_id, ref.str());
      if (c->files.size() != 1 || !ends_with(c->files[0], ".safetensors"))
        fail("{}: names {} file(s) in {}; an image model's single file is one .safetensors", name, c->files.size(), c->dir);
      std::string path = join_path(c->dir, c->files[0]);
      if (!file_exists(path)) fail("{}: {} is not downloaded; run `kvad pull {}`", name, path, ref.str());
      return {path, true, last_name(c->files[0])};
    }
    ImageModelRef r = folder_ref(c->dir, name);
    r.name = ref.repo_id;
    return r;
  }
  fail("{}: no such image model folder or file, and no model of that name in kvad's store ({})", name, store_models_dir());
}

std::unique_ptr<image::Painter> load_painter(const std::string& name, const std::string& base, WeightFormat fmt) {
  ImageModelRef m = resolve_image_model(name);
  if (!m.single_file) return image::Painter::load(m.path, fmt);
  if (base.empty())
    fail("{}: a single-file checkpoint holds no configs or tokenizers; give the diffusers folder of the model it was "
         "fine-tuned from (kvad images make --base, kvad serve --image-base; SD 1.5: stable-diffusion-v1-5/stable-diffusion-v1-5, SDXL: "
         "stabilityai/stable-diffusion-xl-base-1.0; its weights are not read)",
         name);
  ImageModelRef b = resolve_image_model(base);
  if (b.single_file) fail("--base {}: must be a diffusers folder (model_index.json), not a single file", base);
  return image::Painter::load_single_file(m.path, b.path, fmt);
}

}  // namespace kvad
