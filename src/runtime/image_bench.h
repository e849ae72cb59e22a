// Speed of an image model's two heavy parts at real size, formats side by side: one denoising
// step (a UNet call of batch 2, classifier-free guidance's two rows) and one VAE decode. The
// formats take turns rep by rep on the same inputs, so a drift of the machine's speed shifts them
// alike and their ratio holds; each rep also records the cores other processes used.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backend/weight.h"
#include "runtime/bench.h"

namespace kvad {

struct ImageBenchRun {
  std::string part;    // "unet" or "vae"
  WeightFormat format = WeightFormat::F32;
  Stats seconds;       // per call
  std::vector<double> reps;  // each measured rep's seconds, in order (paired across formats)
  double load_s = 0;
  double other_cores = 0;  // the most other processes used during a rep
};

struct ImageBenchOptions {
  std::string unet_dir, vae_dir;  // either may be empty
  std::vector<WeightFormat> formats{WeightFormat::F32};
  int64_t image_size = 0;  // pixels per side; 0: the UNet's sample_size x 8 (512 for SD 1.5)
  int64_t batch = 2;       // UNet rows per call (2: guidance)
  int reps = 3, warmup = 1;
  int64_t tokens = 77;     // context length of the UNet's cross-attention
};

// Loads each part once per format, then measures. Random inputs (seeded): speed does not depend
// on the values. The VAE runs in the format the painter gives it for each one asked for (bf16 for
// q8: image::PartFormats), each once.
std::vector<ImageBenchRun> bench_image_parts(const ImageBenchOptions& o);

}  // namespace kvad
