// kvad images make on the tiny SD 1.5 pipeline (../shared/peer-image): it runs, writes a PNG of
// the asked size with the A1111 `parameters` chunk, the same seed paints the same pixels and
// another seed others, --preview writes one image per step, and bad flags or a bad model folder
// are a clear message and a non-zero exit.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include "core/cpu.h"
#include "core/fs.h"
#include "core/json.h"
#include "image/png.h"
#include "peer_image.h"
#include "test_support.h"

using namespace kvad;
using test::run_kvad;

namespace {

std::string model() { return test::peer_image("models/sd15-tiny"); }

struct Made {
  test::RunResult run;
  image::Rgb8 png;
  std::map<std::string, std::string> text;
};

Made make(const std::string& out, const std::string& flags) {
  Made m;
  m.run = run_kvad("images make 'a red fox in fresh snow' --model '" + model() + "' --out '" + out + "' " + flags);
  if (m.run.exit_code == 0) m.png = image::decode_png(read_file(out), &m.text, out);
  return m;
}

}  // namespace

TEST(CliImages, PaintsThePngWithItsParametersAndRepeatsBySeed) {
  KVAD_REQUIRE_PEER_IMAGE();
  std::string dir = test::temp_dir("cli-images");
  std::string preview = join_path(dir, "preview");
  Made a = make(join_path(dir, "a.png"),
                "--size 128x64 --steps 2 --seed 3 --negative blurry --preview '" + preview + "'");
  ASSERT_EQ(a.run.exit_code, 0) << a.run.err;
  EXPECT_EQ(a.png.w, 128);
  EXPECT_EQ(a.png.h, 64);
  EXPECT_EQ(a.text["parameters"],
            "a red fox in fresh snow\nNegative prompt: blurry\nSteps: 2, Sampler: Euler, CFG scale: 7.5, Seed: 3, "
            "Size: 128x64, Model: sd15-tiny");
  EXPECT_EQ(a.run.out, join_path(dir, "a.png") + "\n");
  // The progress (one line per step when stderr is not a terminal) and the final timings line.
  EXPECT_NE(a.run.err.find("step   2/2"), std::string::npos) << a.run.err;
  EXPECT_NE(a.run.err.find("ETA"), std::string::npos) << a.run.err;
  for (const char* part : {"text encode", "denoise", "decode", "peak memory"})
    EXPECT_NE(a.run.err.find(part), std::string::npos) << part << "\n" << a.run.err;
  for (const char* step : {"step-01.png", "step-02.png"}) {
    image::Rgb8 p = image::decode_png(read_file(join_path(preview, step)), nullptr, step);
    EXPECT_EQ(p.w, 128);  // the 16x8 latent, x8
    EXPECT_EQ(p.h, 64);
  }

  Made b = make(join_path(dir, "b.png"), "--size 128x64 --steps 2 --seed 3 --negative blurry");
  ASSERT_EQ(b.run.exit_code, 0) << b.run.err;
  EXPECT_EQ(b.png.px, a.png.px);
  Made c = make(join_path(dir, "c.png"), "--size 128x64 --steps 2 --seed 4 --negative blurry");
  ASSERT_EQ(c.run.exit_code, 0) << c.run.err;
  EXPECT_NE(c.png.px, a.png.px);
  // Euler ancestral, and the default size (the UNet's sample_size 16 x 8 = 128).
  // Unquoted words are the prompt too.
  std::string d_png = join_path(dir, "d.png");
  test::RunResult d = run_kvad("images make a red fox --model '" + model() + "' --steps 1 --seed 3 --sampler euler_a --out '" +
                               d_png + "'");
  ASSERT_EQ(d.exit_code, 0) << d.err;
  std::map<std::string, std::string> d_text;
  EXPECT_EQ(image::decode_png(read_file(d_png), &d_text).w, 128);
  EXPECT_EQ(d_text["parameters"], "a red fox\nSteps: 1, Sampler: Euler a, CFG scale: 7.5, Seed: 3, Size: 128x128, "
                                  "Model: sd15-tiny");
}

TEST(CliImages, BadFlagsAndFoldersAreClearErrors) {
  KVAD_REQUIRE_PEER_IMAGE();
  std::string dir = test::temp_dir("cli-images-bad");
  std::string out = join_path(dir, "x.png");
  auto expect_error = [&](const std::string& args, int code, const std::string& says) {
    test::RunResult r = run_kvad("images make 'a fox' --out '" + out + "' " + args);
    EXPECT_EQ(r.exit_code, code) << args << "\n" << r.err;
    EXPECT_NE(r.err.find(says), std::string::npos) << args << "\n" << r.err;
    EXPECT_FALSE(file_exists(out)) << args;
  };
  const std::string m = "--model '" + model() + "' ";
  expect_error(m + "--size 100x64", 1, "multiples of 64");
  expect_error(m + "--size 64xlarge", 1, "--size 64xlarge: expected WIDTHxHEIGHT");
  expect_error(m + "--quant q4", 2, "--quant");
  expect_error(m + "--size 0", 1, "multiples of 64");
  test::RunResult nodir = run_kvad("images make 'a fox' " + m + "--out '" + dir + "/missing/x.png'");
  EXPECT_EQ(nodir.exit_code, 1);
  EXPECT_NE(nodir.err.find("does not exist"), std::string::npos) << nodir.err;
  expect_error(m + "--sampler heun", 2, "--sampler");
  expect_error(m + "--steps 0", 2, "--steps");
  expect_error(m + "--guidance -1", 2, "--guidance");
  expect_error("--model '" + dir + "/nothing'", 1, "no such image model folder or file");
  expect_error("--model '" + model() + "/unet'", 1, "model_index.json");
  expect_error("", 2, "--model");
  test::RunResult r = run_kvad("images make --model '" + model() + "'");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("prompt"), std::string::npos) << r.err;
}

// --quant q8 paints and says what each part became; kvad bench images times the tiny pipeline's
// parts in every format the painter would give them: the VAE never q8, and bf16 only on a CPU
// with bf16 products (AVX512-BF16; the child inherits this process's KVAD_ISA).
TEST(CliImages, QuantisedFormatsPaintAndBenchmark) {
  KVAD_REQUIRE_PEER_IMAGE();
  const bool bf16_vae = avx512_bf16_enabled();
  std::string dir = test::temp_dir("cli-images-quant");
  Made q8 = make(join_path(dir, "q8.png"), "--quant q8 --steps 2 --seed 5");
  ASSERT_EQ(q8.run.exit_code, 0) << q8.run.err;
  const std::string formats = bf16_vae ? "UNet q8, VAE bf16, text encoders q8" : "UNet q8, VAE f32, text encoders q8";
  EXPECT_NE(q8.run.err.find(formats), std::string::npos) << q8.run.err;
  EXPECT_EQ(q8.png.w, 128);
  const std::string json = join_path(dir, "bench.json");
  test::RunResult b = run_kvad("bench images --unet '" + model() + "/unet' --vae '" + model() + "/vae' --size 128 -r 2 "
                               "--warmup 0 --json-out '" + json + "'");
  ASSERT_EQ(b.exit_code, 0) << b.err;
  for (const char* row : {"unet  f32", "unet  bf16", "unet  q8", "vae   f32"})
    EXPECT_NE(b.out.find(row), std::string::npos) << row << "\n" << b.out;
  EXPECT_EQ(b.out.find("vae   bf16") != std::string::npos, bf16_vae) << b.out;
  EXPECT_EQ(b.out.find("vae   q8"), std::string::npos) << b.out;
  Json j = read_json_file(json);
  ASSERT_EQ(j["runs"].size(), bf16_vae ? 5u : 4u);
  for (const Json& r : j["runs"]) {
    EXPECT_EQ(r["reps"].size(), 2u);
    EXPECT_GT(r["seconds"]["median"].get<double>(), 0.0);
  }
  test::RunResult none = run_kvad("bench images");
  EXPECT_NE(none.exit_code, 0);
  EXPECT_NE(none.err.find("--unet DIR"), std::string::npos) << none.err;
  test::RunResult q4 = run_kvad("bench images --unet '" + model() + "/unet' -q f32,q4");
  EXPECT_NE(q4.exit_code, 0);
  EXPECT_NE(q4.err.find("f32, bf16 or q8"), std::string::npos) << q4.err;
}

TEST(CliImages, CtrlCStopsBetweenStepsAndWritesNothing) {
  KVAD_REQUIRE_PEER_IMAGE();
  std::string out = join_path(test::temp_dir("cli-images-int"), "never.png");
  // 1000 steps take far longer than the 3 s before timeout sends SIGINT (the load, under ASan too, far less).
  // --foreground: without it timeout signals the child and then its whole process group, so a busy
  // child can take two SIGINTs, and a second Ctrl-C rightly ends kvad at once (1 run in 5 here).
  test::RunResult r = test::run_kvad_under("timeout --foreground --preserve-status -s INT 3",
                                           "images make 'a fox' --model '" + model() + "' --size 64 --steps 1000 --out '" +
                                               out + "'");
  EXPECT_EQ(r.exit_code, 130) << r.err;
  EXPECT_NE(r.err.find("no image written"), std::string::npos) << r.err;
  EXPECT_FALSE(file_exists(out));
}

TEST(CliImages, SdxlPaintsAtItsOwnMultiple) {
  KVAD_REQUIRE_PEER_IMAGE();
  // SDXL's tiny UNet has 3 levels: sizes are multiples of 8 x 4 = 32.
  std::string out = join_path(test::temp_dir("cli-images-xl"), "xl.png");
  std::string xl = test::peer_image("models/sdxl-tiny");
  test::RunResult r = run_kvad("images make 'a fox' --model '" + xl + "' --size 96x64 --steps 2 --seed 1 --out '" + out + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::map<std::string, std::string> text;
  image::Rgb8 png = image::decode_png(read_file(out), &text);
  EXPECT_EQ(png.w, 96);
  EXPECT_EQ(png.h, 64);
  EXPECT_NE(text["parameters"].find("Size: 96x64, Model: sdxl-tiny"), std::string::npos) << text["parameters"];
  r = run_kvad("images make 'a fox' --model '" + xl + "' --size 80x64 --out '" + out + "'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("multiples of 32"), std::string::npos) << r.err;
}

TEST(CliImages, ModelsByStoreNameAndSingleFilesWithTheirBase) {
  KVAD_REQUIRE_PEER_IMAGE();
  std::string dir = test::temp_dir("cli-images-names");
  const std::string single = test::peer_image("models/sd15-tiny-single-file.safetensors");
  const std::string flags = " --size 64 --steps 2 --seed 9 --out '";
  // The folder itself, then the single file holding the same weights with the folder as its base.
  test::RunResult f = run_kvad("images make 'a fox' --model '" + model() + "'" + flags + dir + "/folder.png'");
  ASSERT_EQ(f.exit_code, 0) << f.err;
  test::RunResult s = run_kvad("images make 'a fox' --model '" + single + "' --base '" + model() + "'" + flags + dir + "/single.png'");
  ASSERT_EQ(s.exit_code, 0) << s.err;
  std::map<std::string, std::string> text;
  EXPECT_EQ(image::decode_png(read_file(dir + "/single.png"), &text).px, image::decode_png(read_file(dir + "/folder.png")).px);
  EXPECT_NE(text["parameters"].find("Model: sd15-tiny-single-file.safetensors"), std::string::npos) << text["parameters"];
  // Without --base: said what to give, nothing loaded.
  test::RunResult nobase = run_kvad("images make 'a fox' --model '" + single + "'" + flags + dir + "/x.png'");
  EXPECT_EQ(nobase.exit_code, 1);
  EXPECT_NE(nobase.err.find("give the diffusers folder of the model it was fine-tuned from (kvad images make --base"), std::string::npos)
      << nobase.err;
  // A store name (KVAD_HOME/models/ORG/NAME), and a name that is nowhere.
  std::string home = dir + "/home";
  std::filesystem::create_directories(home + "/models/art");
  std::filesystem::copy(model(), home + "/models/art/tiny", std::filesystem::copy_options::recursive);
  setenv("KVAD_HOME", home.c_str(), 1);
  test::RunResult named = run_kvad("images make 'a fox' --model art/tiny" + flags + dir + "/named.png'");
  test::RunResult missing = run_kvad("images make 'a fox' --model art/nope" + flags + dir + "/y.png'");
  unsetenv("KVAD_HOME");
  ASSERT_EQ(named.exit_code, 0) << named.err;
  EXPECT_EQ(image::decode_png(read_file(dir + "/named.png")).px, image::decode_png(read_file(dir + "/folder.png")).px);
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("art/nope"), std::string::npos) << missing.err;
  // A text model's folder is not a pipeline.
  std::filesystem::create_directories(dir + "/textmodel");
  std::ofstream(dir + "/textmodel/config.json") << "{}";
  test::RunResult text_model = run_kvad("images make 'a fox' --model '" + dir + "/textmodel'" + flags + dir + "/z.png'");
  EXPECT_EQ(text_model.exit_code, 1);
  EXPECT_NE(text_model.err.find("no model_index.json"), std::string::npos) << text_model.err;
}
