// Euler / Euler ancestral (src/image/scheduler.h) against diffusers 0.25.1 itself
// (../shared/peer-image/goldens): the training tables, timesteps / sigmas / init_noise_sigma for
// every config and step count diffusers was run with, the SDXL 30-step check (958 ... 1), the
// recorded 4-step generations' scaled inputs and latents, one Euler and one Euler-ancestral step
// against the formula in double precision, and the configs it refuses.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "core/json.h"
#include "image/scheduler.h"
#include "peer_image.h"
#include "test_support.h"

using namespace kvad;
using namespace kvad::image;

namespace {

// The SD numbers every config in scheduler_euler.json uses (its notes: scaled_linear 0.00085 .. 0.012).
SchedulerConfig sd_config(const std::string& spacing, int64_t offset) {
  Json j = {{"beta_start", 0.00085}, {"beta_end", 0.012}, {"beta_schedule", "scaled_linear"},
            {"num_train_timesteps", 1000}, {"timestep_spacing", spacing}, {"steps_offset", offset}};
  return parse_scheduler_config(j, "test");
}

std::vector<float> floats(const Json& a) { return a.get<std::vector<float>>(); }

}  // namespace

TEST(ImageScheduler, TrainTablesEqualDiffusers) {
  KVAD_REQUIRE_PEER_IMAGE();
  test::Goldens g("scheduler_tables.safetensors");
  TrainTables t = train_tables(sd_config("leading", 1));
  // Bit-exact: the same float32 operations in the same order as torch.
  EXPECT_EQ(t.betas, g.floats("betas"));
  EXPECT_EQ(t.alphas_cumprod, g.floats("alphas_cumprod"));
  EXPECT_EQ(t.sigmas, g.floats("train_sigmas"));
}

TEST(ImageScheduler, EveryGoldenConfigAndStepCount) {
  KVAD_REQUIRE_PEER_IMAGE();
  Json gold = read_json_file(test::peer_image("goldens/scheduler_euler.json"));
  int checked = 0;
  for (auto& [name, cfg] : gold["configs"].items()) {
    SCOPED_TRACE(name);
    ASSERT_EQ(cfg["interpolation_type"], "linear");
    SchedulerConfig c = sd_config(cfg["timestep_spacing"], cfg["steps_offset"]);
    for (auto& [steps, want] : cfg["steps"].items()) {
      SCOPED_TRACE("steps " + steps);
      for (Sampler s : {Sampler::Euler, Sampler::EulerAncestral}) {  // the same set_timesteps
        EulerScheduler e(c, s, std::stoll(steps));
        EXPECT_EQ(e.timesteps(), floats(want["timesteps"]));
        EXPECT_EQ(e.sigmas(), floats(want["sigmas"]));
        EXPECT_EQ(e.init_noise_sigma(), want["init_noise_sigma"].get<float>());
      }
      checked++;
    }
  }
  EXPECT_EQ(checked, 7 * 6);
}

TEST(ImageScheduler, SdxlThirtyStepsRead958To1) {
  // The real SDXL scheduler json (the tiny SDXL pipeline carries it): leading, steps_offset 1.
  KVAD_REQUIRE_PEER_IMAGE();
  SchedulerConfig c = read_scheduler_config(test::peer_image("models/sdxl-tiny/scheduler/scheduler_config.json"));
  EulerScheduler e(c, Sampler::Euler, 30);
  ASSERT_EQ(e.steps(), 30);
  for (int64_t i = 0; i < 30; i++) EXPECT_EQ(e.timesteps()[(size_t)i], (float)(958 - 33 * i));
  EXPECT_NEAR(e.sigmas()[0], 11.477, 1e-3);
  EXPECT_NEAR(e.init_noise_sigma(), 11.520, 1e-3);
}

// The recorded 4-step generations: scale_model_input gives the UNet's sample, step() turns the
// guided prediction into the next latents, bit for bit (the README's float32 order).
TEST(ImageScheduler, FourStepGenerationsMatchDiffusers) {
  KVAD_REQUIRE_PEER_IMAGE();
  for (const char* run : {"sd15", "sdxl"}) {
    SCOPED_TRACE(run);
    test::Goldens g(std::string(run) + "_pipeline.safetensors");
    SchedulerConfig c =
        read_scheduler_config(test::peer_image(std::string("models/") + run + "-tiny/scheduler/scheduler_config.json"));
    EulerScheduler e(c, Sampler::Euler, 4);
    EXPECT_EQ(e.timesteps(), g.floats("timesteps"));
    EXPECT_EQ(e.sigmas(), g.floats("sigmas"));
    std::vector<float> x = g.floats("latents_passed");
    for (float& v : x) v *= e.init_noise_sigma();
    EXPECT_EQ(x, g.floats("step0.latents_in"));
    for (int64_t i = 0; i < 4; i++) {
      std::string s = "step" + std::to_string(i) + ".";
      EXPECT_EQ(e.timesteps()[(size_t)i], g.floats(s + "t")[0]);
      std::vector<float> in(x.size());
      e.scale_model_input(i, x.data(), in.data(), (int64_t)x.size());
      std::vector<float> sample = g.floats(s + "unet_sample");  // [2, ...]: the same input twice
      EXPECT_EQ(in, std::vector<float>(sample.begin(), sample.begin() + (ptrdiff_t)in.size()));
      e.step(i, g.floats(s + "guided_noise_pred").data(), x.data(), (int64_t)x.size(), nullptr);
      EXPECT_EQ(x, g.floats(s + "latents_out")) << s;
    }
    // The VAE then decodes latents / scaling_factor (float32 division).
    float scaling = read_json_file(test::peer_image(std::string("models/") + run + "-tiny/vae/config.json"))["scaling_factor"];
    for (float& v : x) v = v / scaling;
    EXPECT_EQ(x, g.floats("vae_decode_input"));
  }
}

// One step of each sampler against its formula in double (k-diffusion's form): Euler
// x + (sigma_next - sigma) * eps; ancestral sigma_up = sqrt(s1^2 (s0^2 - s1^2) / s0^2),
// sigma_down = sqrt(s1^2 - sigma_up^2), x + (sigma_down - sigma) * eps + noise * sigma_up.
TEST(ImageScheduler, OneStepAgainstTheFormulaInDouble) {
  SchedulerConfig c = sd_config("leading", 1);
  const int64_t n = 64;
  std::vector<float> x0(n), eps(n), noise(n);
  for (int64_t k = 0; k < n; k++) {
    x0[k] = std::sin(0.37f * (float)k) * 3.0f;
    eps[k] = std::cos(0.11f * (float)k + 1.0f);
    noise[k] = std::sin(1.3f * (float)k + 0.5f);
  }
  for (Sampler s : {Sampler::Euler, Sampler::EulerAncestral}) {
    EulerScheduler e(c, s, 20);
    const int64_t i = 3;
    double s0 = e.sigmas()[i], s1 = e.sigmas()[i + 1];
    double up = 0, down = s1;
    if (s == Sampler::EulerAncestral) {
      up = std::sqrt(s1 * s1 * (s0 * s0 - s1 * s1) / (s0 * s0));
      down = std::sqrt(s1 * s1 - up * up);
      EXPECT_NEAR(e.ancestral(i).sigma_up, up, 1e-6 * s0);
      EXPECT_NEAR(e.ancestral(i).sigma_down, down, 1e-6 * s0);
    }
    std::vector<float> x = x0;
    e.step(i, eps.data(), x.data(), n, noise.data());
    for (int64_t k = 0; k < n; k++) {
      double want = (double)x0[k] + (down - s0) * (double)eps[k] + (double)noise[k] * up;
      EXPECT_NEAR(x[k], want, 1e-5) << sampler_name(s) << " element " << k;
    }
    std::vector<float> in(n);
    e.scale_model_input(i, x0.data(), in.data(), n);
    for (int64_t k = 0; k < n; k++) EXPECT_NEAR(in[k], x0[k] / std::sqrt(s0 * s0 + 1), 1e-6);
  }
  // The last step lands on sigma 0 with no noise left to add: the prediction of x0.
  EulerScheduler a(c, Sampler::EulerAncestral, 4);
  EXPECT_EQ(a.ancestral(3).sigma_up, 0.0f);
  std::vector<float> x = x0;
  a.step(3, eps.data(), x.data(), n, noise.data());
  for (int64_t k = 0; k < n; k++) EXPECT_NEAR(x[k], x0[k] - a.sigmas()[3] * eps[k], 1e-5);
  EXPECT_NE(test::error_of([&] { a.step(0, eps.data(), x.data(), n, nullptr); }).find("noise"), std::string::npos);
}

TEST(ImageScheduler, RealSd15PndmJsonFallsBackToLinspace) {
  // The real SD 1.5 scheduler json is a PNDM one without timestep_spacing: Euler's default
  // (linspace) applies, so 4 steps are 999, 666, 333, 0 (README "Discrepancies").
  Json pndm = {{"_class_name", "PNDMScheduler"}, {"beta_end", 0.012}, {"beta_schedule", "scaled_linear"},
               {"beta_start", 0.00085}, {"clip_sample", false}, {"num_train_timesteps", 1000},
               {"set_alpha_to_one", false}, {"skip_prk_steps", true}, {"steps_offset", 1}, {"trained_betas", nullptr}};
  EulerScheduler e(parse_scheduler_config(pndm, "sd15/scheduler_config.json"), Sampler::Euler, 4);
  EXPECT_EQ(e.timesteps(), (std::vector<float>{999, 666, 333, 0}));
  EXPECT_NEAR(e.init_noise_sigma(), 14.6146, 1e-3);
}

TEST(ImageScheduler, RefusesWhatItCannotRun) {
  auto err = [](Json j) { return test::error_of([&] { parse_scheduler_config(j, "x/scheduler_config.json"); }); };
  EXPECT_NE(err({{"use_karras_sigmas", true}}).find("use_karras_sigmas"), std::string::npos);
  EXPECT_NE(err({{"beta_schedule", "squaredcos_cap_v2"}}).find("beta_schedule"), std::string::npos);
  EXPECT_NE(err({{"timestep_spacing", "karras"}}).find("timestep_spacing"), std::string::npos);
  EXPECT_NE(err({{"prediction_type", "sample"}}).find("prediction_type"), std::string::npos);
  EXPECT_NE(err({{"interpolation_type", "log_linear"}}).find("interpolation_type"), std::string::npos);
  EXPECT_NE(err({{"trained_betas", {0.1, 0.2}}}).find("trained_betas"), std::string::npos);
  EXPECT_NE(err({{"num_train_timesteps", -5}}).find("num_train_timesteps"), std::string::npos);
  EXPECT_NE(err({{"beta_end", 2.0}}).find("beta_end"), std::string::npos);
  EXPECT_NE(err(Json::array()).find("x/scheduler_config.json"), std::string::npos);
  SchedulerConfig c = parse_scheduler_config(Json::object(), "defaults");
  EXPECT_NE(test::error_of([&] { EulerScheduler(c, Sampler::Euler, 0); }).find("steps"), std::string::npos);
  EXPECT_NE(test::error_of([&] { EulerScheduler(c, Sampler::Euler, 1001); }).find("1000"), std::string::npos);
  EXPECT_NE(test::error_of([] { read_scheduler_config("/nonexistent/scheduler_config.json"); }).find("/nonexistent"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] { EulerScheduler(c, Sampler::Euler, 4).step(4, nullptr, nullptr, 0, nullptr); })
                .find("step 4 of a 4-step schedule"),
            std::string::npos);
  SchedulerConfig harsh = parse_scheduler_config({{"beta_start", 0.9}, {"beta_end", 0.99}}, "harsh.json");
  EXPECT_NE(test::error_of([&] { EulerScheduler(harsh, Sampler::Euler, 4); }).find("harsh.json: the noise schedule overflows"),
            std::string::npos);
}
