// A diffusers pipeline folder: `model_index.json` names the pipeline class and, per part, the
// library and class that saved it ({"unet": ["diffusers", "UNet2DConditionModel"], ...}, or
// [null, null] for a part the pipeline does without, like SD 1.5's safety checker); each part
// lives in the sub-folder of its name with its own config.json and weights.
//
// Two pipelines are read: StableDiffusionPipeline (SD 1.5 and its fine-tunes) and
// StableDiffusionXLPipeline (SDXL base). Any other class (img2img, inpainting, the SDXL refiner,
// FLUX, ...) is refused by name rather than run as the wrong thing.
#pragma once
#include <map>
#include <memory>
#include <string>

#include "core/json.h"
#include "io/safetensors.h"

namespace kvad::image {

enum class PipelineKind { SD15, SDXL };
const char* pipeline_kind_name(PipelineKind k);

struct PipelinePart {
  std::string name;        // "text_encoder", "unet", ...
  std::string library;     // "transformers" | "diffusers"
  std::string class_name;  // "CLIPTextModel", ...
  std::string dir;         // the folder holding it
};

struct PipelineFolder {
  std::string dir;
  std::string class_name;
  PipelineKind kind = PipelineKind::SD15;
  // SDXL: an absent negative prompt gives all-zero negative embeddings (true in the real SDXL
  // model_index.json; diffusers' default when the key is absent is true as well).
  bool force_zeros_for_empty_prompt = true;
  std::map<std::string, PipelinePart> parts;  // the parts it has (non-null entries)

  bool has(const std::string& name) const { return parts.count(name) != 0; }
  const PipelinePart& part(const std::string& name) const;  // throws naming model_index.json
};

// Parses model_index.json's object (`what` names it in errors); `dir` is the pipeline folder.
// Checks the class, that every part the pipeline needs is listed with a class kvad reads; does not
// touch the file system.
PipelineFolder parse_model_index(const Json& j, const std::string& what, const std::string& dir);
// Reads dir/model_index.json and checks that each needed part's folder exists.
PipelineFolder read_pipeline_folder(const std::string& dir);

// The weights of one part folder, whatever diffusers named them: model.safetensors,
// diffusion_pytorch_model.safetensors, their .fp16 variants, the sharded forms with their index
// json, or else the folder's only .safetensors file. Errors name the folder and what was looked for.
std::unique_ptr<SafetensorsCheckpoint> open_part_weights(const std::string& part_dir);

}  // namespace kvad::image
