// diffusers' UNet2DConditionModel as SD 1.5 and SDXL use it (and their fine-tunes; sizes from the
// unet folder's config.json, so the tiny test pipelines load the same way): sinusoidal timestep
// embedding -> MLP; SDXL's "text_time" added embedding (pooled text + six micro-conditioning
// numbers); conv_in; down blocks (ResNet blocks, spatial transformers with self- and
// cross-attention, stride-2 conv downsampling); a mid block; up blocks taking the down path's
// skips; GroupNorm, SiLU, conv_out. One tensor table driving the load, the forward written out
// on image/nn.h (unet.cpp), the ResNet block and spatial transformer in image/unet_blocks.h.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/json.h"
#include "image/nn.h"
#include "io/checkpoint.h"

namespace kvad::image {

struct UnetConfig {
  std::string source;  // config.json's path, for messages
  int64_t in_channels = 4, out_channels = 4;
  std::vector<int64_t> block_out_channels;             // per level
  std::vector<std::string> down_block_types, up_block_types;
  std::vector<int64_t> heads;                           // per level (diffusers' attention_head_dim)
  std::vector<int64_t> transformer_layers;              // per level
  int64_t layers_per_block = 2, norm_groups = 32, cross_attention_dim = 768;
  double norm_eps = 1e-5;
  bool linear_projection = false;                       // proj_in/out Linear (SDXL) or 1x1 conv (SD 1.5)
  bool flip_sin_to_cos = true;
  double freq_shift = 0;
  // SDXL's addition_embed_type "text_time"; 0 when absent.
  int64_t addition_time_embed_dim = 0, projection_class_embeddings_input_dim = 0;
  int64_t time_embed_dim() const { return 4 * block_out_channels.at(0); }
};

// Parses a unet/config.json object (`what` names it in errors); anything it cannot run (other
// block types, class embeddings, time_cond_proj, attention kinds) is refused by key and value.
UnetConfig parse_unet_config(const Json& j, const std::string& what);

// What the UNet is called with for one denoising step of a batch (CFG: 2 rows, negative first).
struct UnetInput {
  const Map* latents = nullptr;     // [batch, h, w, in_channels], already scaled for the step
  float timestep = 0;               // float: fractional for linspace schedules
  const float* context = nullptr;   // [batch, tokens, cross_attention_dim]
  int64_t tokens = 77;
  const float* pooled = nullptr;    // SDXL: [batch, projection] text_embeds
  const float* time_ids = nullptr;  // SDXL: [batch, 6] orig_h, orig_w, crop_top, crop_left, target_h, target_w
  StageRunner run_stage;            // each block of the call runs through it (nn.h)
};

class Unet {
 public:
  // A unet folder: config.json and its weights (any of diffusers' file names, image/pipeline_config.h).
  static std::unique_ptr<Unet> load(const std::string& dir, WeightFormat fmt = WeightFormat::F32);
  // From a parsed config and a checkpoint whose names are diffusers' (the single-file loader
  // renames Stability's into these).
  // Every layer copies its weights (convolutions reordered, formats converted; image/nn.h) and
  // releases the file's pages as it goes, so the checkpoint is not kept: a 10 GB SDXL UNet does
  // not count twice in memory. Every tensor the
  // table lists is read with its shape checked; the caller checks that nothing is left unread
  // (a single file holds the other parts too).
  Unet(const UnetConfig& c, std::shared_ptr<Checkpoint> ck, WeightFormat fmt);
  ~Unet();

  const UnetConfig& config() const { return c_; }
  // The predicted noise (or v), [batch, h, w, out_channels]. h and w must be multiples of
  // 2^(levels - 1).
  Map predict(const UnetInput& in) const;
  // Optional: called with each named stage's output as diffusers' module hooks see it
  // ("time_proj", "time_embedding", "add_time_proj", "add_embedding", "conv_in", "down_blocks.0",
  // ..., "mid_block", "up_blocks.0", ..., "conv_norm_out", "conv_out"): the tests compare them.
  using Probe = void (*)(void* ctx, const std::string& name, const Map& value);
  void set_probe(Probe p, void* ctx) { probe_ = p; probe_ctx_ = ctx; }

 private:
  struct Impl;
  UnetConfig c_;
  std::unique_ptr<Impl> impl_;
  Probe probe_ = nullptr;
  void* probe_ctx_ = nullptr;
};

}  // namespace kvad::image
