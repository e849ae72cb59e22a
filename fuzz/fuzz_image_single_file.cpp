// libFuzzer: arbitrary bytes as a single-file Stable Diffusion checkpoint (Stability's layout,
// image/single_file.h): the safetensors header parsed in memory, then every tensor name placed
// into the UNet / VAE / text-encoder parts under both the SD 1.5 and the SDXL block layouts (the
// index arithmetic, the OpenCLIP q/k/v slices, the squeezed and transposed views), and every view
// read back. A file that is not one is a kvad::Error naming it; never a crash or a read outside
// the bytes.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "backend/weight.h"
#include "core/error.h"
#include "image/single_file.h"
#include "io/safetensors.h"

namespace {

kvad::image::SingleFileLayout layout(bool sdxl) {
  kvad::image::SingleFileLayout L;
  L.unet_levels = sdxl ? 3 : 4;
  L.unet_layers_per_block = 2;
  L.unet_down_attention = sdxl ? std::vector<bool>{false, true, true} : std::vector<bool>{true, true, true, false};
  L.unet_up_attention = sdxl ? std::vector<bool>{true, true, false} : std::vector<bool>{false, true, true, true};
  L.vae_levels = 4;
  return L;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<kvad::TensorView> tensors;
  try {
    tensors = kvad::SafetensorsFile::parse(data, size, "fuzz.safetensors");
  } catch (const kvad::Error&) {
    return 0;
  }
  for (bool sdxl : {false, true}) {
    try {
      kvad::image::SingleFile sf = kvad::image::place_tensors(tensors, nullptr, "fuzz.safetensors", layout(sdxl));
      for (auto* part : {&sf.unet, &sf.vae, &sf.text_encoder, &sf.text_encoder_2}) {
        if (!*part) continue;
        for (const std::string& n : (*part)->names()) {
          kvad::TensorView v = (*part)->get(n);
          // Every view lies inside the input, whatever reshaping or slicing made it.
          if (v.nbytes && (v.data < data || v.data + v.nbytes > data + size)) abort();
          if (v.numel() <= (1 << 16)) (void)kvad::to_f32(v);
        }
      }
    } catch (const kvad::Error&) {
    }
  }
  return 0;
}
