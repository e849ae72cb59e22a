// Euler and Euler ancestral (scheduler.h). Each formula cites the diffusers 0.25.1 / torch / numpy
// expression it reproduces, because matching bit for bit depends on the order of float32 operations.
#include "image/scheduler.h"

#include <cmath>

#include "core/error.h"

namespace kvad::image {
namespace {

// torch.linspace(start, end, steps) in float32 as torch 1.13's CPU kernel computes it on an AVX2
// machine (what diffusers ran on; tests/image_scheduler.cpp checks every value): step =
// (end - start) / (steps - 1) in float; the first half counts up from start, the second down from
// end; runs of 8 (one Vectorized<float>, two per loop turn) take a base from that rule and add
// k * step; the rest element by element. The compiler contracts `a + b * c` into an FMA there,
// and plain float arithmetic gives 128 of 1000 SD betas one ulp off, so std::fma it is.
std::vector<float> torch_linspace_f32(double start_d, double end_d, int64_t steps) {
  const float start = (float)start_d, end = (float)end_d;
  std::vector<float> v((size_t)steps);
  if (steps == 1) {
    v[0] = start;
    return v;
  }
  const float step = (end - start) / (float)(steps - 1);
  const int64_t halfway = steps / 2;
  auto at = [&](int64_t i) {  // start + step * i, or end - step * (steps - i - 1)
    return i < halfway ? std::fma(step, (float)i, start) : std::fma(-step, (float)(steps - i - 1), end);
  };
  const int64_t vec_end = steps / 16 * 16;
  for (int64_t i = 0; i < vec_end; i += 8) {
    float base = at(i);
    for (int64_t k = 0; k < 8; k++) v[(size_t)(i + k)] = std::fma((float)k, step, base);
  }
  for (int64_t i = vec_end; i < steps; i++) v[(size_t)i] = at(i);
  return v;
}

// np.interp(x, arange(len(fp)), fp) at one x in [0, len - 1], in float64.
double interp(double x, const std::vector<float>& fp) {
  int64_t n = (int64_t)fp.size();
  if (x <= 0) return fp[0];
  if (x >= (double)(n - 1)) return fp[(size_t)n - 1];
  int64_t j = (int64_t)std::floor(x);
  if ((double)j == x) return fp[(size_t)j];
  double slope = ((double)fp[(size_t)j + 1] - (double)fp[(size_t)j]) / 1.0;
  return slope * (x - (double)j) + (double)fp[(size_t)j];
}

template <typename E>
E pick(const Json& j, const char* key, const std::string& dflt, const std::string& what,
       std::initializer_list<std::pair<const char*, E>> options) {
  std::string v = json_str_or(j, key, dflt, what);
  std::string names;
  for (auto& [name, e] : options) {
    if (v == name) return e;
    names += names.empty() ? name : std::string(", ") + name;
  }
  fail("{}: '{}' = '{}' is not supported (this sampler runs {})", what, key, v, names);
}

}  // namespace

SchedulerConfig parse_scheduler_config(const Json& j, const std::string& what) {
  if (!j.is_object()) fail("{}: must be a JSON object", what);
  using C = SchedulerConfig;
  C c;
  c.source = what;
  c.class_name = json_str_or(j, "_class_name", "", what);
  c.train_steps = json_int_or(j, "num_train_timesteps", 1000, what);
  if (c.train_steps < 2 || c.train_steps > 100000)
    fail("{}: 'num_train_timesteps' = {} is outside [2, 100000]", what, c.train_steps);
  c.beta_start = json_num_or(j, "beta_start", c.beta_start, what);
  c.beta_end = json_num_or(j, "beta_end", c.beta_end, what);
  if (!(c.beta_start > 0 && c.beta_start < 1 && c.beta_end > 0 && c.beta_end < 1))
    fail("{}: 'beta_start' / 'beta_end' ({} / {}) must lie in (0, 1)", what, c.beta_start, c.beta_end);
  c.betas = pick<C::Betas>(j, "beta_schedule", "linear", what,
                           {{"linear", C::Betas::Linear}, {"scaled_linear", C::Betas::ScaledLinear}});
  c.spacing = pick<C::Spacing>(j, "timestep_spacing", "linspace", what,
                               {{"linspace", C::Spacing::Linspace}, {"leading", C::Spacing::Leading},
                                {"trailing", C::Spacing::Trailing}});
  c.steps_offset = json_int_or(j, "steps_offset", 0, what);
  if (c.steps_offset < 0 || c.steps_offset >= c.train_steps)
    fail("{}: 'steps_offset' = {} must lie in [0, num_train_timesteps)", what, c.steps_offset);
  c.prediction = pick<C::Prediction>(j, "prediction_type", "epsilon", what,
                                     {{"epsilon", C::Prediction::Epsilon}, {"v_prediction", C::Prediction::VPrediction}});
  pick<int>(j, "interpolation_type", "linear", what, {{"linear", 0}});
  pick<int>(j, "timestep_type", "discrete", what, {{"discrete", 0}});
  if (json_bool_or(j, "use_karras_sigmas", false, what)) fail("{}: 'use_karras_sigmas' = true is not supported yet", what);
  if (json_bool_or(j, "rescale_betas_zero_snr", false, what))
    fail("{}: 'rescale_betas_zero_snr' = true is not supported yet", what);
  if (j.contains("trained_betas") && !j["trained_betas"].is_null())
    fail("{}: 'trained_betas' is not supported yet (only beta_schedule)", what);
  return c;
}

SchedulerConfig read_scheduler_config(const std::string& path) { return parse_scheduler_config(read_json_file(path), path); }

TrainTables train_tables(const SchedulerConfig& c) {
  TrainTables t;
  if (c.betas == SchedulerConfig::Betas::Linear) {
    t.betas = torch_linspace_f32(c.beta_start, c.beta_end, c.train_steps);
  } else {  // torch.linspace(beta_start**0.5, beta_end**0.5, N, dtype=float32) ** 2
    t.betas = torch_linspace_f32(std::sqrt(c.beta_start), std::sqrt(c.beta_end), c.train_steps);
    for (float& b : t.betas) b = b * b;
  }
  // torch.cumprod(1.0 - betas): CPU cumprod accumulates in double (acc_type<float>) and stores floats.
  double running = 1.0;
  for (float b : t.betas) {
    running *= (double)(1.0f - b);
    t.alphas_cumprod.push_back((float)running);
  }
  for (float ac : t.alphas_cumprod) t.sigmas.push_back(std::sqrt((1.0f - ac) / ac));
  return t;
}

EulerScheduler::EulerScheduler(const SchedulerConfig& c, Sampler sampler, int64_t steps) : config_(c), sampler_(sampler) {
  const int64_t N = c.train_steps;
  if (steps < 1 || steps > N) fail("{}: {} steps: must lie in [1, {}] (num_train_timesteps)", c.source, steps, N);
  std::vector<double> t((size_t)steps);
  switch (c.spacing) {
    case SchedulerConfig::Spacing::Linspace: {  // np.linspace(0, N - 1, steps)[::-1]
      double step = steps > 1 ? (double)(N - 1) / (double)(steps - 1) : 0.0;
      for (int64_t i = 0; i < steps; i++) t[(size_t)(steps - 1 - i)] = (double)i * step;
      if (steps > 1) t[0] = (double)(N - 1);
      break;
    }
    case SchedulerConfig::Spacing::Leading: {  // (arange(steps) * (N // steps)).round()[::-1] + steps_offset
      int64_t ratio = N / steps;
      for (int64_t i = 0; i < steps; i++) t[(size_t)(steps - 1 - i)] = (double)(i * ratio);
      break;
    }
    case SchedulerConfig::Spacing::Trailing: {  // np.arange(N, 0, -N / steps).round() - 1
      double delta = -(double)N / (double)steps;
      auto len = (int64_t)std::ceil((0.0 - (double)N) / delta);
      if (len != steps) fail("{}: trailing spacing gives {} timesteps for {} steps", c.source, len, steps);
      double first = (double)N, d = (first + delta) - first;  // numpy's arange fill: start + i * (x1 - x0)
      for (int64_t i = 0; i < steps; i++) t[(size_t)i] = std::nearbyint(first + (double)i * d);
      break;
    }
  }
  // timesteps.astype(float32) (+ steps_offset / - 1 as float32 adds)
  for (double v : t) {
    float f = (float)v;
    if (c.spacing == SchedulerConfig::Spacing::Leading) f += (float)c.steps_offset;
    if (c.spacing == SchedulerConfig::Spacing::Trailing) f -= 1.0f;
    timesteps_.push_back(f);
  }
  TrainTables tables = train_tables(c);
  for (float ts : timesteps_) sigmas_.push_back((float)interp((double)ts, tables.sigmas));
  sigmas_.push_back(0.0f);
  float max_sigma = 0;
  for (float s : sigmas_) max_sigma = std::max(max_sigma, s);
  init_noise_sigma_ = c.spacing == SchedulerConfig::Spacing::Leading ? std::sqrt(max_sigma * max_sigma + 1.0f) : max_sigma;
  // Betas near 1 over many training steps drive alphas_cumprod to 0 and the noise levels to infinity.
  if (!std::isfinite(init_noise_sigma_))
    fail("{}: the noise schedule overflows float32 (sigma_max {}): check beta_start / beta_end / num_train_timesteps",
         c.source, max_sigma);
}

void EulerScheduler::check_step(int64_t i) const {
  if (i < 0 || i >= steps()) fail("{}: step {} of a {}-step schedule", config_.source, i, steps());
}

void EulerScheduler::scale_model_input(int64_t i, const float* x, float* out, int64_t n) const {
  check_step(i);
  float sigma = sigmas_.at((size_t)i);
  float denom = std::sqrt(sigma * sigma + 1.0f);  // (sigma**2 + 1) ** 0.5, then sample / that
  for (int64_t k = 0; k < n; k++) out[k] = x[k] / denom;
}

EulerScheduler::Ancestral EulerScheduler::ancestral(int64_t i) const {
  check_step(i);
  float from = sigmas_.at((size_t)i), to = sigmas_.at((size_t)i + 1);
  // sigma_up = (to**2 * (from**2 - to**2) / from**2) ** 0.5; sigma_down = (to**2 - sigma_up**2) ** 0.5
  float up = std::sqrt(to * to * (from * from - to * to) / (from * from));
  float down = std::sqrt(to * to - up * up);
  return {up, down};
}

void EulerScheduler::step(int64_t i, const float* model_output, float* x, int64_t n, const float* noise) const {
  check_step(i);
  float sigma = sigmas_.at((size_t)i), next = sigmas_.at((size_t)i + 1);
  bool v_pred = config_.prediction == SchedulerConfig::Prediction::VPrediction;
  // v-prediction: x0 = out * (-sigma / (sigma**2 + 1) ** 0.5) + x / (sigma**2 + 1)
  float s2p1 = sigma * sigma + 1.0f, v_coef = -sigma / std::sqrt(s2p1);
  Ancestral a{0, next};
  if (sampler_ == Sampler::EulerAncestral) {
    if (!noise) fail("Euler ancestral step {}: needs a noise source", i);
    a = ancestral(i);
  }
  float dt = a.sigma_down - sigma;  // Euler: sigma_next - sigma_hat, sigma_hat = sigma (s_churn 0)
  for (int64_t k = 0; k < n; k++) {
    float x0 = v_pred ? model_output[k] * v_coef + x[k] / s2p1 : x[k] - sigma * model_output[k];
    float d = (x[k] - x0) / sigma;
    float out = x[k] + d * dt;
    if (sampler_ == Sampler::EulerAncestral) out = out + noise[k] * a.sigma_up;
    x[k] = out;
  }
}

const char* sampler_name(Sampler s) { return s == Sampler::Euler ? "euler" : "euler_a"; }

Sampler parse_sampler(const std::string& name) {
  if (name == "euler") return Sampler::Euler;
  if (name == "euler_a") return Sampler::EulerAncestral;
  fail("unknown sampler '{}' (euler, euler_a)", name);
}

}  // namespace kvad::image
