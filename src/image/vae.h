// diffusers' AutoencoderKL (the SD 1.5 / SDXL VAE): the decoder turns a latent [h, w, 4] into
// pixels [8h, 8w, 3] (conv_in, a mid block of ResNet + single-head attention + ResNet, up blocks
// of ResNets with nearest x2 + conv, GroupNorm, SiLU, conv_out), and the encoder goes the other way
// (for img2img later; tested now against the goldens). Sizes from the vae folder's config.json.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/json.h"
#include "image/nn.h"
#include "io/checkpoint.h"

namespace kvad::image {

struct VaeConfig {
  std::string source;
  int64_t in_channels = 3, out_channels = 3, latent_channels = 4, layers_per_block = 2, norm_groups = 32;
  std::vector<int64_t> block_out_channels;
  double scaling_factor = 0.18215;
  bool force_upcast = false;  // SDXL's VAE overflows f16; kvad runs it in f32 anyway
};
VaeConfig parse_vae_config(const Json& j, const std::string& what);

class Vae {
 public:
  static std::unique_ptr<Vae> load(const std::string& dir, WeightFormat fmt = WeightFormat::F32);
  // Every layer copies its weights (image/nn.h), so the checkpoint is not kept. Every tensor the
  // table lists is read with its shape checked; the caller checks that nothing is left unread
  // (a single file holds the other parts too).
  Vae(const VaeConfig& c, std::shared_ptr<Checkpoint> ck, WeightFormat fmt);
  ~Vae();
  const VaeConfig& config() const { return c_; }

  // latents as the denoiser leaves them (the pipeline divides by scaling_factor here), [n, h, w, 4]
  // -> image in [-1, 1] (unclamped), [n, 8h, 8w, 3].
  // `run`: each block through it (nn.h's StageRunner; the server's engine thread).
  Map decode(const Map& latents, const StageRunner& run = {}) const;
  // image in [-1, 1] [n, H, W, 3] -> the posterior's mean and logvar [n, H/8, W/8, 4] each.
  void encode(const Map& image, Map& mean, Map& logvar) const;

  using Probe = void (*)(void* ctx, const std::string& name, const Map& value);
  void set_probe(Probe p, void* ctx) { probe_ = p; probe_ctx_ = ctx; }

 private:
  struct Impl;
  VaeConfig c_;
  std::unique_ptr<Impl> impl_;
  Probe probe_ = nullptr;
  void* probe_ctx_ = nullptr;
};

}  // namespace kvad::image
