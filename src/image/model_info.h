// What an image model on disk is, from its files without loading weights (`kvad ls`, the server's
// lists): a diffusers pipeline folder (model_index.json) or a single-file checkpoint in
// Stability's layout; its kind (SD 1.5 / SDXL), parameters and dtypes from the safetensors
// headers. Never throws: what goes wrong is in `problem`.
#pragma once
#include <cstdint>
#include <string>

namespace kvad::image {

struct ImageModelInfo {
  std::string kind;     // "SD 1.5 pipeline", "SDXL pipeline", "SD 1.5 single file", "SDXL single file"
  std::string problem;  // "" when it reads
  int64_t parameters = 0;
  uint64_t weight_bytes = 0;
  std::string dtype;  // the dtype holding most parameters
};

bool is_pipeline_folder(const std::string& dir);  // has model_index.json
ImageModelInfo describe_pipeline_folder(const std::string& dir);
// A .safetensors file: kind "" (and no problem) when it is not a single-file SD checkpoint.
ImageModelInfo describe_single_file(const std::string& path);

}  // namespace kvad::image
