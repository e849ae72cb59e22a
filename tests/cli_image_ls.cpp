// kvad ls finds image models as users get them: a diffusers pipeline folder in kvad's store, an
// SDXL repo in the Hugging Face cache, and a single-file checkpoint at that repo's top, each with
// its kind, parameters (from the safetensors headers) and dtype; a LoRA-like safetensors file is
// not mistaken for one. The tiny pipelines are the peer's (tests/fixtures/peer-image).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/fs.h"
#include "core/json.h"
#include "io/safetensors.h"
#include "peer_image.h"
#include "test_support.h"

using namespace kvad;
namespace fs = std::filesystem;

TEST(CliImageLs, PipelinesAndSingleFilesWithTheirKind) {
  KVAD_REQUIRE_PEER_IMAGE();
  std::string t = test::temp_dir("image-ls");
  fs::create_directories(t + "/home/models/test");
  fs::copy(test::peer_image("models/sd15-tiny"), t + "/home/models/test/sd15-tiny", fs::copy_options::recursive);
  std::string snap = t + "/hf/models--org--sd/snapshots/abc123";
  fs::create_directories(snap);
  fs::create_directories(t + "/hf/models--org--sd/refs");
  fs::copy(test::peer_image("models/sdxl-tiny"), snap, fs::copy_options::recursive);
  fs::copy_file(test::peer_image("models/sd15-tiny-single-file.safetensors"), snap + "/fine-tune.safetensors");
  write_safetensors(snap + "/some-lora.safetensors", {{"lora_unet_x.alpha", DType::F32, {1}, std::string(4, '\0')}});
  std::ofstream(t + "/hf/models--org--sd/refs/main") << "abc123";
  setenv("KVAD_HOME", (t + "/home").c_str(), 1);
  setenv("HF_HUB_CACHE", (t + "/hf").c_str(), 1);
  auto r = test::run_kvad("ls --json");
  unsetenv("KVAD_HOME");
  unsetenv("HF_HUB_CACHE");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::map<std::string, Json> rows;
  size_t at = 0;
  for (size_t nl; (nl = r.out.find('\n', at)) != std::string::npos; at = nl + 1) {
    Json j = Json::parse(r.out.substr(at, nl - at));
    rows[j["name"]] = j;
  }
  ASSERT_EQ(rows.size(), 3u) << r.out;
  const Json& sd15 = rows["test/sd15-tiny"];
  EXPECT_EQ(sd15["kind"], "image");
  EXPECT_EQ(sd15["arch"], "SD 1.5 pipeline (image)");
  // Parameters: every tensor of the unet, vae and text encoder files, whatever else the folder holds.
  int64_t want = 0;
  for (const char* part : {"unet/diffusion_pytorch_model.safetensors", "vae/diffusion_pytorch_model.safetensors",
                           "text_encoder/model.safetensors"}) {
    SafetensorsFile f(test::peer_image("models/sd15-tiny/") + part);
    for (const TensorView& v : f.tensors()) want += v.numel();
  }
  EXPECT_EQ(sd15["parameters"], want);
  EXPECT_EQ(sd15["format"], "safetensors f32");
  EXPECT_EQ(rows["org/sd"]["arch"], "SDXL pipeline (image)");
  const Json& single = rows["org/sd:fine-tune.safetensors"];
  EXPECT_EQ(single["arch"], "SD 1.5 single file (image)");
  EXPECT_EQ(single["parameters"], want) << "the single file holds the same weights";
  EXPECT_EQ(rows.count("org/sd:some-lora.safetensors"), 0u);
}
