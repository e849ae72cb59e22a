// The painter (docs/architecture.md's term): a loaded text-to-image pipeline (SD 1.5 or SDXL:
// tokenizers + text encoders, UNet, VAE, the scheduler's config) and the loop that makes an image,
// as diffusers' StableDiffusion(XL)Pipeline.__call__ does with an Euler sampler:
//   conditioning = encode_prompt(prompt, negative)         [2 rows, negative first]
//   x = noise (seeded, kvad's Rng) or the given latents, times init_noise_sigma
//   for each step i: in = scale(x); eps2 = unet(cat(in, in), t_i, conditioning)
//                    eps = uncond + g * (text - uncond); x = scheduler.step(eps, x)
//   image = vae.decode(x / scaling_factor) -> RGB8
// With guidance <= 1 the UNet runs on the prompt row alone (diffusers' do_classifier_free_guidance).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "image/nn.h"
#include "image/pipeline_config.h"
#include "image/png.h"
#include "image/prompt.h"
#include "image/scheduler.h"
#include "image/unet.h"
#include "image/vae.h"

namespace kvad::image {

struct PaintRequest {
  std::string prompt;
  std::optional<std::string> negative;  // none: SD 1.5 encodes "", SDXL gives zeros (force_zeros_for_empty_prompt)
  int64_t width = 0, height = 0;        // 0: the pipeline's default (the UNet's sample_size x 8)
  int64_t steps = 20;
  double guidance = 7.5;
  Sampler sampler = Sampler::Euler;
  uint64_t seed = 0;
  // Given initial latents (unit normal, before init_noise_sigma), [1, height/8, width/8, 4], as
  // diffusers' `latents=` argument; absent: drawn from the seed. Euler ancestral's step noise
  // always comes from the seed.
  const Map* latents = nullptr;
  // Where the heavy stages run (the text encoders, each block of a UNet call, each block of the
  // VAE): called with each and must run it before returning. The server hands them to its engine
  // thread one by one, so a language model's streams go on between the blocks of an image; empty:
  // on the calling thread. An exception it throws (a client gone, a server stopping) ends the painting.
  StageRunner run_stage;
};

// What each step reports (the progress bar, previews, and the tests' comparisons).
struct StepReport {
  int64_t step = 0, total = 0;  // step counts from 0
  float timestep = 0, sigma = 0;
  double seconds = 0, elapsed = 0;  // this step; since the denoising began
  const Map* unet_input = nullptr;   // [batch, h, w, 4]: the scaled latents, both rows
  const Map* unet_output = nullptr;  // [batch, h, w, 4]: raw prediction (uncond first)
  const Map* guided = nullptr;       // [1, h, w, 4]: after guidance
  const Map* denoised = nullptr;     // [1, h, w, 4]: the step's estimate of the clean latent (x0)
  const Map* latents = nullptr;      // [1, h, w, 4]: x after the step
};
using StepCallback = std::function<void(const StepReport&)>;

struct PaintTimings {
  double text_encode = 0, denoise = 0, decode = 0;  // seconds
};

struct PaintResult {
  Map image;  // [1, height, width, 3], the VAE's output in [-1, 1] (unclamped)
  Rgb8 rgb;   // clamp(image / 2 + 0.5) x 255 rounded: the PNG's pixels
  Map latents;  // the final latents (the VAE's input times scaling_factor)
  PaintTimings timings;
  int64_t width = 0, height = 0;
};

// What each part's weights become for one --quant choice. The UNet takes the format asked for
// (it is >95% of the work); the text encoders too (they run once per image, but SDXL's are 0.8 B
// parameters of memory); the VAE never goes below bf16: q8 on its 512-channel convolutions over a
// full-resolution image is where quantisation error shows as colour noise, and bf16 already halves
// its time; on a CPU without bf16 products (AVX2) it stays f32, faster there (docs/images.md,
// "Speed and formats").
struct PartFormats {
  WeightFormat unet = WeightFormat::F32, vae = WeightFormat::F32, text = WeightFormat::AsStored;
  static PartFormats for_quant(WeightFormat q);
  std::string describe() const;  // "UNet q8, VAE bf16, text encoders q8"
};

class Painter {
 public:
  // A diffusers pipeline folder (model_index.json and its parts), its weights in `fmt` (f32, bf16
  // or q8: PartFormats::for_quant).
  static std::unique_ptr<Painter> load(const std::string& dir, WeightFormat fmt = WeightFormat::F32);
  // A single-file checkpoint in Stability's layout (image/single_file.h): its UNet, VAE and text
  // encoder(s) from the file; the configs, tokenizers and scheduler from `base_dir`, the diffusers
  // folder of the model it was fine-tuned from (its weights are not read).
  static std::unique_ptr<Painter> load_single_file(const std::string& file, const std::string& base_dir,
                                                   WeightFormat fmt = WeightFormat::F32);
  ~Painter();

  PipelineKind kind() const { return folder_.kind; }
  const PartFormats& formats() const { return formats_; }
  const std::string& dir() const { return folder_.dir; }
  // Width and height must be positive multiples of this: the VAE's factor (8 for 4 levels) times the
  // UNet's 2^(levels - 1).
  int64_t size_multiple() const;
  int64_t default_size() const { return default_size_; }
  int64_t vae_factor() const;
  const SchedulerConfig& scheduler_config() const { return sched_; }
  const Vae& vae() const { return *vae_; }

  // The memory one painting at width x height needs beyond the weights (bytes, an estimate with a
  // quarter's margin): the stages run one at a time, so the larger of the VAE decode at full
  // resolution (its last levels hold about 5 maps of the first level's width per pixel: ~2.5 KB a
  // pixel for SD's 128) and a UNet call of batch 2 (per latent row at its widest level, ~80 bytes
  // per channel: the skips, q/k/v and GEGLU's 3 x 4 x width). Measured: SD 1.5's VAE decode 0.70 /
  // 2.72 GB at 512 / 1024 (estimate 0.90 / 3.42), its UNet 0.29 GB at 512 (docs/images.md, "Memory").
  size_t working_bytes(int64_t width, int64_t height) const;

  // Checks a request's sizes and numbers (errors say what is allowed); fills the defaults.
  PaintRequest checked(const PaintRequest& r) const;
  PaintResult paint(const PaintRequest& r, const StepCallback& on_step = {}) const;

  // The latent's 4 channels mixed to RGB by a fixed 4x3 matrix + bias (ComfyUI's published factors
  // for the SD 1.5 and SDXL VAEs), nearest-upscaled by `scale`: a blurry, slightly wrong preview.
  Rgb8 preview(const Map& latents, int64_t scale = 8) const;

 private:
  Painter() = default;
  // The checks that the parts fit together, the scheduler and the default size (both loads).
  void finish_load(const std::string& what);
  PipelineFolder folder_;
  PromptEncoder text_;
  std::unique_ptr<Unet> unet_;
  std::unique_ptr<Vae> vae_;
  SchedulerConfig sched_;
  int64_t default_size_ = 512;
  PartFormats formats_;
};

}  // namespace kvad::image
