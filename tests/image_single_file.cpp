// Single-file checkpoints (src/image/single_file.h) against diffusers' own conversion: the tiny
// SD 1.5 pipeline written as ONE original-layout file by diffusers'
// convert_diffusers_to_original_stable_diffusion.py (tests/fixtures/peer-image/models) must give,
// part by part, exactly the diffusers folder's tensors: the same names, shapes and values; and the
// SD 1.5 text encoder read from it must reproduce transformers' outputs. For SDXL the weights file
// is not shipped (its README: size budget), but its names and shapes are
// (sdxl-tiny-single-file.keys.json, written by convert_diffusers_to_original_sdxl.py): a file with
// those names and shapes must map onto exactly the SDXL folder's names and shapes.
#include <gtest/gtest.h>

#include <fstream>

#include "core/error.h"
#include "core/fs.h"
#include "image/clip_text.h"
#include "image/painter.h"
#include "image/pipeline_config.h"
#include "image/single_file.h"
#include "io/safetensors.h"
#include "peer_image.h"
#include "test_support.h"

using namespace kvad;
using namespace kvad::image;

namespace {

std::set<std::string> names_of(const Checkpoint& c) {
  auto v = c.names();
  return {v.begin(), v.end()};
}

// Every tensor of the folder's part has its twin in the single file's view: same shape, same values.
void expect_same_part(Checkpoint& view, const std::string& part_dir, bool compare_values) {
  auto folder = open_part_weights(part_dir);
  std::set<std::string> want = names_of(*folder), got = names_of(view);
  for (const std::string& n : want) EXPECT_TRUE(got.count(n)) << part_dir << ": the single file has no " << n;
  for (const std::string& n : got) EXPECT_TRUE(want.count(n)) << part_dir << ": the single file adds " << n;
  for (const std::string& n : want) {
    if (!got.count(n)) continue;
    TensorView a = folder->get(n), b = view.get(n);
    ASSERT_EQ(a.shape, b.shape) << n;
    if (compare_values) {
      ASSERT_EQ(to_f32(a), to_f32(b)) << n;
    }
  }
}

}  // namespace

TEST(ImageSingleFile, Sd15FileIsTheFolderPartByPart) {
  KVAD_REQUIRE_PEER_IMAGE();
  PipelineFolder base = read_pipeline_folder(test::peer_image("models/sd15-tiny"));
  SingleFile sf = open_single_file(test::peer_image("models/sd15-tiny-single-file.safetensors"), layout_from_base(base));
  EXPECT_EQ(sf.kind, PipelineKind::SD15);
  EXPECT_EQ(sf.text_encoder_2, nullptr);
  expect_same_part(*sf.unet, base.part("unet").dir, true);
  expect_same_part(*sf.vae, base.part("vae").dir, true);  // incl. the attention's 1x1 convs as linear
  expect_same_part(*sf.text_encoder, base.part("text_encoder").dir, true);
  sf.check_all_read();
  // The text encoder through the view reproduces transformers' outputs.
  test::Goldens g("sd15_text_encoder.safetensors");
  ClipTextConfig c = parse_clip_text_config(read_json_file(base.part("text_encoder").dir + "/config.json"), "config.json");
  ClipTextEncoder enc(c, sf.text_encoder);
  ClipTextOutput out = enc.encode(g.ids("prompt_astronaut.input_ids"));
  test::Deviation d = test::deviation(out.last_hidden_state, g.floats("prompt_astronaut.last_hidden_state"));
  EXPECT_LE(d.abs, 2e-5);
}

TEST(ImageSingleFile, SdxlNamesAndShapesAreTheFolders) {
  KVAD_REQUIRE_PEER_IMAGE();
  // keys.json: {"keys": {name: [[shape], dtype]}}
  Json keys = read_json_file(test::peer_image("models/sdxl-tiny-single-file.keys.json"))["keys"];
  ASSERT_GT(keys.size(), 1000u);
  std::vector<TensorToWrite> tensors;
  for (auto& [name, spec] : keys.items()) {
    std::vector<int64_t> shape = spec[0].get<std::vector<int64_t>>();
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    tensors.push_back({name, DType::F32, shape, std::string((size_t)n * 4, '\0')});
  }
  std::string path = test::temp_dir("sdxl-single") + "/sdxl.safetensors";
  write_safetensors(path, tensors);
  PipelineFolder base = read_pipeline_folder(test::peer_image("models/sdxl-tiny"));
  SingleFile sf = open_single_file(path, layout_from_base(base));
  EXPECT_EQ(sf.kind, PipelineKind::SDXL);
  ASSERT_NE(sf.text_encoder_2, nullptr);
  expect_same_part(*sf.unet, base.part("unet").dir, false);
  expect_same_part(*sf.vae, base.part("vae").dir, false);
  expect_same_part(*sf.text_encoder, base.part("text_encoder").dir, false);
  expect_same_part(*sf.text_encoder_2, base.part("text_encoder_2").dir, false);  // q/k/v split, projection transposed
  sf.check_all_read();
}

TEST(ImageSingleFile, WhatIsNotAStableDiffusionFileIsNamed) {
  KVAD_REQUIRE_PEER_IMAGE();
  PipelineFolder base = read_pipeline_folder(test::peer_image("models/sd15-tiny"));
  SingleFileLayout L = layout_from_base(base);
  std::string dir = test::temp_dir("single-bad");
  auto one = [](const std::string& n) { return TensorToWrite{n, DType::F32, {2}, std::string(8, '\0')}; };
  auto expect_error = [&](std::vector<TensorToWrite> t, const std::string& says) {
    write_safetensors(dir + "/f.safetensors", t);
    try {
      open_single_file(dir + "/f.safetensors", L);
      ADD_FAILURE() << "accepted; expected an error saying " << says;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  expect_error({one("lora_unet_down_blocks_0.alpha")}, "not a single-file Stable Diffusion checkpoint");
  expect_error({one("model.diffusion_model.out.2.bias"), one("cond_stage_model.model.ln_final.bias")}, "SD 2.x");
  expect_error({one("model.diffusion_model.out.2.bias")}, "no text encoder");
  // A name under a known prefix that the layout does not have: named, not dropped.
  expect_error({one("model.diffusion_model.input_blocks.40.0.in_layers.0.bias"), one("cond_stage_model.transformer.x")},
               "input_blocks.40");
  expect_error({one("model.diffusion_model.out.2.bias"), one("cond_stage_model.transformer.x"), one("first_stage_model.decoder.up.9.block.0.norm1.bias")},
               "decoder.up.9");
  // Training leftovers are fine.
  write_safetensors(dir + "/ok.safetensors", {one("model.diffusion_model.out.2.bias"), one("cond_stage_model.transformer.text_model.final_layer_norm.bias"),
                                              one("alphas_cumprod"), one("model_ema.decay"),
                                              one("cond_stage_model.transformer.text_model.embeddings.position_ids")});
  SingleFile sf = open_single_file(dir + "/ok.safetensors", L);
  EXPECT_EQ(sf.unet->size(), 1u);
  EXPECT_EQ(sf.text_encoder->size(), 1u);
}

TEST(ImageSingleFile, PaintsWhatTheFolderPaints) {
  KVAD_REQUIRE_PEER_IMAGE();
  const std::string base = test::peer_image("models/sd15-tiny");
  auto folder = Painter::load(base);
  auto single = Painter::load_single_file(test::peer_image("models/sd15-tiny-single-file.safetensors"), base);
  PaintRequest r;
  r.prompt = "a red fox in fresh snow";
  r.steps = 3;
  r.seed = 11;
  PaintResult a = folder->paint(r), b = single->paint(r);
  EXPECT_EQ(a.rgb.px, b.rgb.px) << "the same weights through the file's views paint the same pixels";
  EXPECT_EQ(a.latents.v, b.latents.v);
  // An SDXL base for an SD 1.5 file is refused, naming both.
  try {
    Painter::load_single_file(test::peer_image("models/sd15-tiny-single-file.safetensors"), test::peer_image("models/sdxl-tiny"));
    ADD_FAILURE() << "an SDXL base was accepted for an SD 1.5 file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sd15 checkpoint, but its base"), std::string::npos) << e.what();
  }
}
