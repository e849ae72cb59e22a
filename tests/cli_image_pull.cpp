// kvad pull of a Stable Diffusion repo against the in-process test Hub: a diffusers pipeline
// (model_index.json and its part folders) comes down as the parts kvad paints with, one weight
// variant each (no .bin copies, no safety checker, no top-level single files), then paints
// offline by its Hub name; a repo's single file comes down as ORG/NAME:FILE and paints with the
// pipeline as its base. The tiny pipeline is the peer's (tests/fixtures/peer-image).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>

#include "core/fs.h"
#include "image/png.h"
#include "peer_image.h"
#include "test_hub.h"
#include "test_support.h"

using namespace kvad;
using test::HubFile;
using test::run_kvad;
namespace fs = std::filesystem;

TEST(CliImagePull, APipelineAndASingleFileFromTheHub) {
  KVAD_REQUIRE_PEER_IMAGE();
  test::TestHub hub;
  std::map<std::string, HubFile> files;
  const std::string tiny = test::peer_image("models/sd15-tiny");
  for (auto& e : fs::recursive_directory_iterator(tiny))
    if (e.is_regular_file()) files[fs::relative(e.path(), tiny).generic_string()] = {read_file(e.path().string()), e.file_size() > 1000000};
  // What a real repo also holds, which a pull must leave on the Hub.
  files["unet/diffusion_pytorch_model.bin"] = {std::string(5000, 'x'), false};
  files["unet/diffusion_pytorch_model.fp16.safetensors"] = {std::string(5000, 'y'), false};
  files["safety_checker/model.safetensors"] = {std::string(5000, 'z'), false};
  files["v1-5-pruned.safetensors"] = {read_file(test::peer_image("models/sd15-tiny-single-file.safetensors")), true};
  files["README.md"] = {"# tiny sd\n", false};
  std::string commit = hub.add_commit("org/sd", files);

  std::string home = test::temp_dir("image-pull");
  setenv("HF_HOME", (home + "/hf").c_str(), 1);
  setenv("KVAD_HOME", (home + "/kvad").c_str(), 1);
  setenv("HF_ENDPOINT", hub.endpoint().c_str(), 1);
  auto pulled = run_kvad("pull org/sd");
  ASSERT_EQ(pulled.exit_code, 0) << pulled.err;
  const std::string snap = home + "/hf/hub/models--org--sd/snapshots/" + commit;
  for (const char* f : {"model_index.json", "unet/config.json", "unet/diffusion_pytorch_model.safetensors",
                        "vae/diffusion_pytorch_model.safetensors", "text_encoder/model.safetensors", "tokenizer/vocab.json",
                        "tokenizer/merges.txt", "scheduler/scheduler_config.json"})
    EXPECT_TRUE(file_exists(snap + "/" + f)) << f;
  for (const char* f : {"unet/diffusion_pytorch_model.bin", "unet/diffusion_pytorch_model.fp16.safetensors",
                        "safety_checker/model.safetensors", "v1-5-pruned.safetensors", "README.md"})
    EXPECT_FALSE(file_exists(snap + "/" + f)) << f << " was downloaded";

  // Offline, by its Hub name: the same pixels as the folder it came from.
  setenv("HF_HUB_OFFLINE", "1", 1);
  const std::string flags = " --size 64 --steps 2 --seed 5 --out '";
  auto by_name = run_kvad("images make 'a fox' --model org/sd" + flags + home + "/hub.png'");
  auto by_dir = run_kvad("images make 'a fox' --model '" + tiny + "'" + flags + home + "/dir.png'");
  ASSERT_EQ(by_name.exit_code, 0) << by_name.err;
  ASSERT_EQ(by_dir.exit_code, 0) << by_dir.err;
  EXPECT_EQ(image::decode_png(read_file(home + "/hub.png")).px, image::decode_png(read_file(home + "/dir.png")).px);
  auto not_pulled = run_kvad("images make 'a fox' --model org/sd:v1-5-pruned.safetensors --base org/sd" + flags + home + "/x.png'");
  EXPECT_EQ(not_pulled.exit_code, 1);
  EXPECT_NE(not_pulled.err.find("kvad pull org/sd:v1-5-pruned.safetensors"), std::string::npos) << not_pulled.err;
  unsetenv("HF_HUB_OFFLINE");

  // The single file, by ORG/NAME:FILE, with the pipeline as its base.
  auto one = run_kvad("pull org/sd:v1-5-pruned.safetensors");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  setenv("HF_HUB_OFFLINE", "1", 1);
  auto single = run_kvad("images make 'a fox' --model org/sd:v1-5-pruned.safetensors --base org/sd" + flags + home + "/single.png'");
  ASSERT_EQ(single.exit_code, 0) << single.err;
  EXPECT_EQ(image::decode_png(read_file(home + "/single.png")).px, image::decode_png(read_file(home + "/dir.png")).px);
  auto ls = run_kvad("ls");
  EXPECT_NE(ls.out.find("SD 1.5 pipeline (image)"), std::string::npos) << ls.out;
  EXPECT_NE(ls.out.find("org/sd:v1-5-pruned.safetensors"), std::string::npos) << ls.out;
  for (const char* v : {"HF_HOME", "KVAD_HOME", "HF_ENDPOINT", "HF_HUB_OFFLINE"}) unsetenv(v);
}
