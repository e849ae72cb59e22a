// The VAE (src/image/vae.h) against diffusers' AutoencoderKL in float32
// (../shared/peer-image/goldens/{sd15,sdxl}_vae.safetensors): the decode of fixed 4x4 latents
// (raw output and the [0, 1] image), the encode of a 32x32 image (posterior mean, logvar, the
// scaled latents img2img would use), and for SD 1.5 every recorded intermediate through the probe;
// config refusals name the key.
//
// Tolerance: the README measured diffusers' own float32 vs float64 decode at <= 9.2e-7 (values up to
// ~1.3). kvad against diffusers: see kTolAbs's comment (printed by these tests).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "core/error.h"
#include "core/fs.h"
#include "image/vae.h"
#include "peer_image.h"
#include "test_support.h"

using namespace kvad;
using namespace kvad::image;

namespace {

// Measured 2026-12-03 (release build, printed below): outputs (decode_out, image_01, mean, logvar)
// <= 1.9e-6 absolute; intermediates (values up to ~25) <= 1.3e-5 absolute, <= 2.1e-6 relative to
// the largest value (the encoder's conv_out). Asserted: 6e-6 absolute on outputs, 6e-6 relative
// everywhere (3x), far below the smallest VAE bug the README lists (mid attention without
// 1/sqrt(d): 7.4e-2 relative).
constexpr double kTolAbs = 6e-6, kTolRel = 6e-6;

void expect_close(const std::vector<float>& got, const std::vector<float>& want, const std::string& what,
                  bool output = true) {
  test::Deviation d = test::deviation(got, want);
  std::printf("  %-40s max abs %.2e  rel %.2e\n", what.c_str(), d.abs, d.rel);
  if (output) {
    EXPECT_LE(d.abs, kTolAbs) << what;
  }
  EXPECT_LE(d.rel, kTolRel) << what;
}

Map golden_map(const test::Goldens& g, const std::string& name) {
  const TensorView& t = g.view(name);
  std::vector<float> v = g.floats(name);
  return from_nchw(v.data(), t.dim(0), t.dim(1), t.dim(2), t.dim(3));
}

std::unique_ptr<Vae> load(const char* model) { return Vae::load(test::peer_image(std::string("models/") + model + "/vae")); }

// The probe's module names (diffusers') -> the goldens' names.
std::string golden_name(const std::string& probe) {
  if (probe == "post_quant_conv" || probe.rfind("decoder.", 0) == 0) return "dec." + probe;
  return "enc." + probe;
}

struct Probed {
  std::map<std::string, std::vector<float>> seen;
  static void record(void* ctx, const std::string& name, const Map& m) { ((Probed*)ctx)->seen[name] = to_nchw(m); }
};

void check_model(const char* model, const char* golden, bool intermediates) {
  std::unique_ptr<Vae> vae = load(model);
  test::Goldens g(golden);
  Probed probed;
  vae->set_probe(&Probed::record, &probed);

  // decode: the UNet-space latents go in (decode divides by scaling_factor itself).
  Map out = vae->decode(golden_map(g, "latents"));
  ASSERT_EQ(out.c, 3);
  ASSERT_EQ(out.h, 32);
  std::vector<float> raw = to_nchw(out), img01(raw.size());
  expect_close(raw, g.floats("decode_out"), std::string(model) + " decode_out");
  for (size_t i = 0; i < raw.size(); i++) img01[i] = std::clamp(raw[i] / 2 + 0.5f, 0.0f, 1.0f);
  expect_close(img01, g.floats("image_01"), std::string(model) + " image_01");

  Map mean, logvar;
  vae->encode(golden_map(g, "enc.image"), mean, logvar);
  ASSERT_EQ(mean.h, 4);
  ASSERT_EQ(mean.c, 4);
  std::vector<float> m = to_nchw(mean), scaled(m.size());
  expect_close(m, g.floats("enc.mean"), std::string(model) + " enc.mean");
  expect_close(to_nchw(logvar), g.floats("enc.logvar"), std::string(model) + " enc.logvar");
  for (size_t i = 0; i < m.size(); i++) scaled[i] = m[i] * (float)vae->config().scaling_factor;
  expect_close(scaled, g.floats("enc.latents_scaled"), std::string(model) + " enc.latents_scaled");

  if (!intermediates) return;
  int compared = 0;
  for (const auto& [name, v] : probed.seen) {
    expect_close(v, g.floats(golden_name(name)), std::string(model) + " " + golden_name(name), false);
    compared++;
  }
  EXPECT_EQ(compared, 16);  // post_quant_conv, 7 decoder stages; 7 encoder stages, quant_conv
}

}  // namespace

TEST(ImageVae, Sd15DecodeEncodeAndIntermediates) {
  KVAD_REQUIRE_PEER_IMAGE();
  check_model("sd15-tiny", "sd15_vae.safetensors", true);
}

TEST(ImageVae, SdxlDecodeEncode) {
  KVAD_REQUIRE_PEER_IMAGE();
  check_model("sdxl-tiny", "sdxl_vae.safetensors", false);
}

TEST(ImageVae, BatchOfTwoDecodesEachImageAlone) {
  KVAD_REQUIRE_PEER_IMAGE();
  std::unique_ptr<Vae> vae = load("sdxl-tiny");
  test::Goldens g("sdxl_vae.safetensors");
  Map one = golden_map(g, "latents");
  Map two(2, one.h, one.w, one.c);
  for (size_t i = 0; i < one.v.size(); i++) two.v[i] = 0.5f * one.v[i], two.v[one.v.size() + i] = one.v[i];
  Map a = vae->decode(one), b = vae->decode(two);
  ASSERT_EQ(b.n, 2);
  std::vector<float> second(b.v.begin() + (ptrdiff_t)a.v.size(), b.v.end());
  EXPECT_LE(test::deviation(second, a.v).abs, 1e-6);  // GroupNorm statistics are per image
}

TEST(ImageVae, ConfigRefusalsNameTheKey) {
  KVAD_REQUIRE_PEER_IMAGE();
  Json good = read_json_file(test::peer_image("models/sd15-tiny/vae/config.json"));
  EXPECT_NO_THROW(parse_vae_config(good, "vae/config.json"));
  auto err_with = [&](const char* key, Json value) {
    Json j = good;
    j[key] = value;
    return test::error_of([&] { parse_vae_config(j, "vae/config.json"); });
  };
  auto expect_names = [](const std::string& err, const std::string& what) {
    EXPECT_NE(err.find("vae/config.json"), std::string::npos) << err;
    EXPECT_NE(err.find(what), std::string::npos) << err;
  };
  expect_names(err_with("block_out_channels", Json::array({32, 48})), "'block_out_channels' entry 48");
  expect_names(err_with("block_out_channels", Json::array()), "'block_out_channels'");
  expect_names(err_with("block_out_channels", "32"), "'block_out_channels'");
  expect_names(err_with("latent_channels", 0), "'latent_channels'");
  expect_names(err_with("norm_num_groups", -1), "'norm_num_groups'");
  expect_names(err_with("scaling_factor", -0.5), "'scaling_factor'");
  expect_names(err_with("act_fn", "relu"), "'act_fn'");
  expect_names(err_with("up_block_types", Json::array({"UpDecoderBlock2D", "AttnUpDecoderBlock2D", "UpDecoderBlock2D",
                                                       "UpDecoderBlock2D"})),
               "'up_block_types'");
  expect_names(err_with("down_block_types", Json::array({"DownEncoderBlock2D"})), "'down_block_types'");
  expect_names(err_with("_class_name", "AutoencoderTiny"), "'_class_name'");
  expect_names(err_with("shift_factor", 0.1159), "'shift_factor'");
  expect_names(err_with("use_quant_conv", false), "'use_quant_conv'");
  expect_names(test::error_of([&] { parse_vae_config(Json::array(), "vae/config.json"); }), "JSON object");
}

TEST(ImageVae, BadFoldersAndInputs) {
  KVAD_REQUIRE_PEER_IMAGE();
  std::string dir = test::temp_dir("vae");
  auto err = [&] { return test::error_of([&] { Vae::load(dir); }); };
  EXPECT_NE(err().find(join_path(dir, "config.json")), std::string::npos) << err();
  Json j = read_json_file(test::peer_image("models/sd15-tiny/vae/config.json"));
  std::ofstream(join_path(dir, "config.json")) << j.dump();
  EXPECT_NE(err().find("no weights"), std::string::npos) << err();
  std::filesystem::create_symlink(test::peer_image("models/sd15-tiny/vae/diffusion_pytorch_model.safetensors"),
                                  join_path(dir, "diffusion_pytorch_model.safetensors"));
  // Widths that do not match the weights: the tensor is named.
  j["block_out_channels"] = Json::array({64, 64, 64, 64});
  std::ofstream(join_path(dir, "config.json")) << j.dump();
  EXPECT_NE(err().find("encoder.conv_in.weight"), std::string::npos) << err();
  // One level fewer: the last level's tensors are never read, and the guard says so.
  j["block_out_channels"] = Json::array({32, 32, 32});
  j["down_block_types"] = Json::array({"DownEncoderBlock2D", "DownEncoderBlock2D", "DownEncoderBlock2D"});
  j["up_block_types"] = Json::array({"UpDecoderBlock2D", "UpDecoderBlock2D", "UpDecoderBlock2D"});
  std::ofstream(join_path(dir, "config.json")) << j.dump();
  EXPECT_NE(err().find("decoder.up_blocks.3."), std::string::npos) << err();
  EXPECT_NE(err().find("not used"), std::string::npos) << err();

  std::unique_ptr<Vae> vae = load("sd15-tiny");
  EXPECT_NE(test::error_of([&] { vae->decode(Map(1, 4, 4, 3)); }).find("3 channels"), std::string::npos);
  Map mean, logvar;
  EXPECT_NE(test::error_of([&] { vae->encode(Map(1, 20, 32, 3), mean, logvar); }).find("multiples of 8"),
            std::string::npos);
}
