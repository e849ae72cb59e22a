// libFuzzer: arbitrary bytes as the JSON files of a diffusers pipeline folder: model_index.json,
// scheduler/scheduler_config.json, a text encoder's, a VAE's and a UNet's config.json, each parser run on the same
// document. Bad files are kvad::Errors naming the file; a scheduler config that parses builds its
// schedules, whose timesteps and sigmas must be finite and as long as asked.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "image/clip_text.h"
#include "image/pipeline_config.h"
#include "image/scheduler.h"
#include "image/unet.h"
#include "image/vae.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kvad::Json j;
  try {
    j = kvad::parse_json(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz/config.json");
  } catch (const kvad::Error&) {
    return 0;
  }
  try {
    (void)kvad::image::parse_model_index(j, "fuzz/model_index.json", "fuzz");
  } catch (const kvad::Error&) {
  }
  try {
    (void)kvad::image::parse_clip_text_config(j, "fuzz/config.json");
  } catch (const kvad::Error&) {
  }
  try {
    (void)kvad::image::parse_vae_config(j, "fuzz/vae/config.json");
  } catch (const kvad::Error&) {
  }
  try {
    (void)kvad::image::parse_unet_config(j, "fuzz/unet/config.json");
  } catch (const kvad::Error&) {
  }
  try {
    auto c = kvad::image::parse_scheduler_config(j, "fuzz/scheduler_config.json");
    for (int64_t steps : {(int64_t)1, (int64_t)(size % 60) + 1}) {
      for (auto s : {kvad::image::Sampler::Euler, kvad::image::Sampler::EulerAncestral}) {
        try {
          kvad::image::EulerScheduler e(c, s, steps);
          if (e.steps() != steps || (int64_t)e.sigmas().size() != steps + 1) abort();
          for (float v : e.sigmas())
            if (!std::isfinite(v)) abort();
        } catch (const kvad::Error&) {
        }
      }
    }
  } catch (const kvad::Error&) {
  }
  return 0;
}
