// Image models named as text models are: a folder path, a model in kvad's store, a Hub name
// ORG/NAME[@REVISION] found in the Hugging Face cache (offline), and ORG/NAME:FILE for one of a
// repo's single-file checkpoints; a .safetensors path is a single file too. A single file carries
// no configs or tokenizers: they come from `base`, the diffusers folder (named the same ways) of
// the model it was fine-tuned from.
#pragma once
#include <memory>
#include <string>

#include "backend/weight.h"
#include "image/painter.h"

namespace kvad {

struct ImageModelRef {
  std::string path;          // the pipeline folder or the single file
  bool single_file = false;
  std::string name;          // what it is served and recorded as: the folder's or file's name
};
ImageModelRef resolve_image_model(const std::string& name);

// Loads `name` (and for a single file, its `base`; an error says what to give when it is missing).
std::unique_ptr<image::Painter> load_painter(const std::string& name, const std::string& base,
                                             WeightFormat fmt = WeightFormat::F32);

}  // namespace kvad
