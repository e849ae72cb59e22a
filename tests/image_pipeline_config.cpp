// Diffusers pipeline folders (src/image/pipeline_config.h): both tiny pipelines read, weights
// found whatever diffusers named them (plain, .fp16, sharded with an index, any single name),
// and the refusals: other pipeline classes, missing parts and folders, .bin-only weights.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/fs.h"
#include "image/pipeline_config.h"
#include "peer_image.h"
#include "test_support.h"

using namespace kvad;
using namespace kvad::image;
namespace fs = std::filesystem;

TEST(ImagePipelineConfig, ReadsBothTinyPipelines) {
  KVAD_REQUIRE_PEER_IMAGE();
  PipelineFolder sd = read_pipeline_folder(test::peer_image("models/sd15-tiny"));
  EXPECT_EQ(sd.kind, PipelineKind::SD15);
  EXPECT_FALSE(sd.has("safety_checker"));  // [null, null]
  EXPECT_FALSE(sd.has("text_encoder_2"));
  EXPECT_EQ(sd.part("text_encoder").class_name, "CLIPTextModel");
  EXPECT_EQ(sd.part("unet").dir, test::peer_image("models/sd15-tiny/unet"));
  PipelineFolder xl = read_pipeline_folder(test::peer_image("models/sdxl-tiny"));
  EXPECT_EQ(xl.kind, PipelineKind::SDXL);
  EXPECT_TRUE(xl.force_zeros_for_empty_prompt);
  EXPECT_EQ(xl.part("text_encoder_2").class_name, "CLIPTextModelWithProjection");
  EXPECT_NE(test::error_of([&] { sd.part("text_encoder_2"); }).find("model_index.json"), std::string::npos);
  for (const char* part : {"text_encoder", "unet", "vae"})
    EXPECT_FALSE(open_part_weights(sd.part(part).dir)->names().empty()) << part;
}

TEST(ImagePipelineConfig, WeightFilesWhateverTheirNames) {
  KVAD_REQUIRE_PEER_IMAGE();
  std::string src = test::peer_image("models/sd15-tiny/text_encoder/model.safetensors");
  auto found = [](const std::string& dir) { return open_part_weights(dir)->description(); };
  for (const char* name : {"model.safetensors", "diffusion_pytorch_model.safetensors", "model.fp16.safetensors",
                           "diffusion_pytorch_model.fp16.safetensors", "my-finetune.safetensors"}) {
    std::string dir = test::temp_dir("weights");
    fs::create_symlink(src, join_path(dir, name));
    EXPECT_EQ(found(dir), join_path(dir, name));
  }
  // Sharded: the index names the shard for every tensor.
  std::string dir = test::temp_dir("sharded");
  fs::create_symlink(src, join_path(dir, "diffusion_pytorch_model-00001-of-00001.safetensors"));
  Json map = Json::object();
  for (const std::string& n : open_part_weights(fs::path(src).parent_path().string())->names())
    map[n] = "diffusion_pytorch_model-00001-of-00001.safetensors";
  std::ofstream(join_path(dir, "diffusion_pytorch_model.safetensors.index.json")) << Json{{"weight_map", map}}.dump();
  EXPECT_EQ(found(dir), join_path(dir, "diffusion_pytorch_model.safetensors.index.json"));
  // Two unrelated files, or only PyTorch pickles: said so, naming the folder.
  std::string two = test::temp_dir("two");
  fs::create_symlink(src, join_path(two, "a.safetensors"));
  fs::create_symlink(src, join_path(two, "b.safetensors"));
  EXPECT_NE(test::error_of([&] { found(two); }).find(two + ": 2 .safetensors files"), std::string::npos);
  std::string bin = test::temp_dir("bin");
  std::ofstream(join_path(bin, "pytorch_model.bin")) << "x";
  EXPECT_NE(test::error_of([&] { found(bin); }).find(".bin files are not read"), std::string::npos);
}

TEST(ImagePipelineConfig, RefusesOtherPipelinesAndMissingParts) {
  Json sd = {{"_class_name", "StableDiffusionPipeline"},
             {"safety_checker", {nullptr, nullptr}},
             {"scheduler", {"diffusers", "PNDMScheduler"}},
             {"text_encoder", {"transformers", "CLIPTextModel"}},
             {"tokenizer", {"transformers", "CLIPTokenizer"}},
             {"unet", {"diffusers", "UNet2DConditionModel"}},
             {"vae", {"diffusers", "AutoencoderKL"}}};
  EXPECT_EQ(parse_model_index(sd, "m/model_index.json", "m").part("scheduler").class_name, "PNDMScheduler");
  auto err = [](const Json& j) { return test::error_of([&] { parse_model_index(j, "m/model_index.json", "m"); }); };
  for (const char* other : {"StableDiffusionXLImg2ImgPipeline", "FluxPipeline", "StableDiffusionInpaintPipeline"}) {
    Json j = sd;
    j["_class_name"] = other;
    EXPECT_NE(err(j).find(std::string("m/model_index.json: '_class_name' = '") + other), std::string::npos) << err(j);
  }
  Json j = sd;
  j.erase("vae");
  EXPECT_NE(err(j).find("needs 'vae'"), std::string::npos) << err(j);
  j = sd;
  j["text_encoder"] = {"transformers", "T5EncoderModel"};
  EXPECT_NE(err(j).find("T5EncoderModel"), std::string::npos) << err(j);
  j = sd;
  j["unet"] = {"diffusers"};
  EXPECT_NE(err(j).find("'unet' must be [library, class]"), std::string::npos) << err(j);
  j = sd;
  j["_class_name"] = "StableDiffusionXLPipeline";
  EXPECT_NE(err(j).find("needs 'text_encoder_2'"), std::string::npos) << err(j);
  j = sd;
  j["../x"] = {"diffusers", "AutoencoderKL"};
  EXPECT_NE(err(j).find("not a plain folder name"), std::string::npos) << err(j);
  // On disk: no model_index.json, or a listed part whose folder is missing.
  std::string dir = test::temp_dir("pipe");
  EXPECT_NE(test::error_of([&] { read_pipeline_folder(dir); }).find(join_path(dir, "model_index.json")), std::string::npos);
  std::ofstream(join_path(dir, "model_index.json")) << sd.dump();
  EXPECT_NE(test::error_of([&] { read_pipeline_folder(dir); }).find("folder " + join_path(dir, "text_encoder") + " is missing"),
            std::string::npos);
}
