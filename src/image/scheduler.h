// The samplers: diffusers' EulerDiscreteScheduler and EulerAncestralDiscreteScheduler (0.25.1),
// read from a pipeline's `scheduler/scheduler_config.json`. No weights: a table of noise levels
// (sigmas) from the training schedule's betas, the timesteps a generation visits, and the step
// that turns the UNet's noise prediction into the next latent.
//
// Every number is computed in the precision and order diffusers computes it (float32 tensors,
// numpy float64 where diffusers uses numpy), so timesteps and sigmas equal diffusers' bit for bit
// (tests/image_scheduler.cpp against ../shared/peer-image/goldens/scheduler_euler.json):
//   betas          linear: linspace(b0, b1, N); scaled_linear: linspace(sqrt b0, sqrt b1, N)^2 (float32)
//   alphas_cumprod cumprod(1 - betas) (float32 values, double running product as torch's CPU cumprod)
//   train sigmas   sqrt((1 - ac) / ac) (float32)
//   timesteps      linspace: linspace(0, N-1, n) reversed (fractions); leading: arange(n) * (N // n)
//                  reversed + steps_offset; trailing: round(arange(N, 0, -N/n)) - 1
//   sigmas         the train sigmas interpolated linearly at the timesteps (float64), then a final 0
//   init_noise_sigma  sigma_max for linspace/trailing, sqrt(sigma_max^2 + 1) for leading
// A PNDM/DDIM json (the real SD 1.5 ships one) read as Euler takes Euler's defaults for the keys it
// lacks: no `timestep_spacing` means linspace, as EulerDiscreteScheduler.from_config gives.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/json.h"

namespace kvad::image {

struct SchedulerConfig {
  enum class Betas { Linear, ScaledLinear };
  enum class Spacing { Linspace, Leading, Trailing };
  enum class Prediction { Epsilon, VPrediction };
  std::string source;  // the file (or "what") it was read from, for messages
  std::string class_name;
  int64_t train_steps = 1000;
  double beta_start = 0.0001, beta_end = 0.02;  // diffusers' Euler defaults
  Betas betas = Betas::Linear;
  Spacing spacing = Spacing::Linspace;
  int64_t steps_offset = 0;
  Prediction prediction = Prediction::Epsilon;
};

// Parses scheduler_config.json's object; refuses (naming `what` and the key) what this sampler
// cannot honour rather than running a different schedule: karras sigmas, log_linear
// interpolation, continuous timesteps, trained_betas, zero-SNR rescaling, sample prediction,
// other beta schedules.
SchedulerConfig parse_scheduler_config(const Json& j, const std::string& what);
SchedulerConfig read_scheduler_config(const std::string& path);

// The training schedule's tables, float32, train_steps long.
struct TrainTables {
  std::vector<float> betas, alphas_cumprod, sigmas;
};
TrainTables train_tables(const SchedulerConfig& c);

enum class Sampler { Euler, EulerAncestral };

class EulerScheduler {
 public:
  // The schedule of a generation of `steps` steps (1 .. train_steps).
  EulerScheduler(const SchedulerConfig& c, Sampler sampler, int64_t steps);

  int64_t steps() const { return (int64_t)timesteps_.size(); }
  const std::vector<float>& timesteps() const { return timesteps_; }  // what the UNet is given
  const std::vector<float>& sigmas() const { return sigmas_; }        // steps + 1 values, the last 0
  float init_noise_sigma() const { return init_noise_sigma_; }        // initial latents are noise x this

  // The UNet's input at step i: x / sqrt(sigma_i^2 + 1).
  void scale_model_input(int64_t i, const float* x, float* out, int64_t n) const;
  // x <- the latent after step i, from the model's output at step i (guidance already applied).
  // `noise` (n standard normal values) is what Euler ancestral adds scaled by sigma_up; Euler
  // ignores it (may be null).
  void step(int64_t i, const float* model_output, float* x, int64_t n, const float* noise) const;

  // Euler ancestral's split of the step from sigma_i to sigma_{i+1} (float32, as diffusers).
  struct Ancestral {
    float sigma_up, sigma_down;
  };
  Ancestral ancestral(int64_t i) const;

 private:
  void check_step(int64_t i) const;  // i in [0, steps)

  SchedulerConfig config_;
  Sampler sampler_;
  std::vector<float> timesteps_, sigmas_;
  float init_noise_sigma_ = 1;
};

const char* sampler_name(Sampler s);
Sampler parse_sampler(const std::string& name);  // "euler" | "euler_a"

}  // namespace kvad::image
