#include "image/model_info.h"

#include <cctype>
#include <map>

#include "core/dtype.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/text.h"
#include "image/pipeline_config.h"
#include "image/single_file.h"

namespace kvad::image {

namespace {

// Adds a file's tensors to the parameter count and the per-dtype totals.
void count(const std::vector<TensorView>& tensors, ImageModelInfo& info, std::map<std::string, int64_t>& by_dtype) {
  for (const TensorView& t : tensors) {
    info.parameters += t.numel();
    info.weight_bytes += t.nbytes;
    const std::string d = ascii_lower(dtype_name(t.dtype));  // "f32", as text models are listed
    by_dtype[d] += t.numel();
  }
}

void set_dtype(const std::map<std::string, int64_t>& by_dtype, ImageModelInfo& info) {
  int64_t best = -1;
  for (const auto& [d, n] : by_dtype)
    if (n > best) best = n, info.dtype = d;
}

}  // namespace

bool is_pipeline_folder(const std::string& dir) { return file_exists(join_path(dir, "model_index.json")); }

ImageModelInfo describe_pipeline_folder(const std::string& dir) {
  ImageModelInfo info;
  try {
    PipelineFolder p = read_pipeline_folder(dir);
    info.kind = p.kind == PipelineKind::SDXL ? "SDXL pipeline" : "SD 1.5 pipeline";
    std::map<std::string, int64_t> by_dtype;
    for (const char* part : {"unet", "vae", "text_encoder", "text_encoder_2"}) {
      if (!p.has(part)) continue;
      auto ck = open_part_weights(p.part(part).dir);
      std::vector<TensorView> views;
      for (const std::string& n : ck->names()) views.push_back(ck->get(n));
      count(views, info, by_dtype);
    }
    set_dtype(by_dtype, info);
  } catch (const std::exception& e) {
    if (info.kind.empty()) info.kind = "image pipeline";
    info.problem = e.what();
  }
  return info;
}

ImageModelInfo describe_single_file(const std::string& path) {
  ImageModelInfo info;
  try {
    SafetensorsFile f(path);
    bool unet = false;
    for (const TensorView& t : f.tensors()) unet = unet || t.name.rfind("model.diffusion_model.", 0) == 0;
    if (!unet) return info;  // some other safetensors file (a text model's, a LoRA): not an image model
    PipelineKind k;
    try {
      k = detect_single_file(f);
    } catch (const Error& e) {
      info.kind = "single file";
      info.problem = e.what();  // an SD 2.x file, a UNet without its text encoder
      return info;
    }
    info.kind = k == PipelineKind::SDXL ? "SDXL single file" : "SD 1.5 single file";
    std::map<std::string, int64_t> by_dtype;
    count(f.tensors(), info, by_dtype);
    set_dtype(by_dtype, info);
  } catch (const std::exception& e) {
    info.problem = e.what();
  }
  return info;
}

}  // namespace kvad::image
