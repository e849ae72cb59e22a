// The PNG writer (src/image/png.h): an image written (atomically, to a file) and read back with
// libpng has the same pixels and text chunks (tEXt for ASCII, iTXt for UTF-8); the A1111
// `parameters` text; diffusers' float -> uint8 conversion; bad input.
#include <gtest/gtest.h>

#include "core/error.h"
#include "core/fs.h"
#include "core/rng.h"
#include "image/png.h"
#include "test_support.h"

using namespace kvad;
using namespace kvad::image;

TEST(ImagePng, WriteThenReadBackPixelsAndText) {
  Rgb8 img;
  img.w = 37, img.h = 21;  // odd sizes: no row padding assumptions
  img.px.resize((size_t)(img.w * img.h * 3));
  Rng rng(5);
  for (auto& p : img.px) p = (uint8_t)rng.below(256);
  GenerationParams gp;
  gp.prompt = "a red fox in fresh snow";
  gp.negative = "blurry";
  gp.steps = 4, gp.width = 128, gp.height = 128, gp.seed = 1, gp.model = "sd15-tiny";
  std::string params = a1111_parameters(gp);
  EXPECT_EQ(params,
            "a red fox in fresh snow\nNegative prompt: blurry\nSteps: 4, Sampler: Euler, CFG scale: 7.5, Seed: 1, "
            "Size: 128x128, Model: sd15-tiny");
  std::string utf8 = "un renard roux dans la neige fra\xC3\xAE" "che \xE2\x9D\x84";
  std::string path = join_path(test::temp_dir("png"), "fox.png");
  write_png(path, img, {{"parameters", params}, {"Comment", utf8}});
  std::string bytes = read_file(path);
  ASSERT_EQ(bytes.substr(1, 3), "PNG");
  EXPECT_NE(bytes.find("tEXtparameters"), std::string::npos);  // ASCII: a plain tEXt chunk
  EXPECT_NE(bytes.find("iTXtComment"), std::string::npos);     // UTF-8: iTXt
  std::map<std::string, std::string> text;
  Rgb8 back = decode_png(bytes, &text);
  EXPECT_EQ(back.w, img.w);
  EXPECT_EQ(back.h, img.h);
  EXPECT_EQ(back.px, img.px);
  EXPECT_EQ(text["parameters"], params);
  EXPECT_EQ(text["Comment"], utf8);
  // No negative prompt: no line for it.
  gp.negative.clear();
  gp.sampler = "Euler a";
  EXPECT_EQ(a1111_parameters(gp), "a red fox in fresh snow\nSteps: 4, Sampler: Euler a, CFG scale: 7.5, Seed: 1, "
                                  "Size: 128x128, Model: sd15-tiny");
}

TEST(ImagePng, FloatToBytesAsDiffusers) {
  Map m(1, 1, 4, 3);
  // -1 -> 0, 1 -> 255, beyond clamps; 0 -> 0.5 * 255 = 127.5 rounds half to even: 128.
  float vals[12] = {-1, 1, 0, -3, 3, 0.0039215686f, 2.0f / 255 - 1, 0.5f, -0.5f, 1.0f / 255 - 1, 0, 0};
  std::copy(vals, vals + 12, m.v.begin());
  Rgb8 r = to_rgb8(m);
  std::vector<uint8_t> want = {0, 255, 128, 0, 255, 128, 1, 191, 64, 0, 128, 128};
  // (1/255 - 1) / 2 + 0.5 = 1/510: 0.5 after x 255, half to even: 0.
  EXPECT_EQ(r.px, want);
}

TEST(ImagePng, BadInput) {
  Rgb8 img;
  img.w = 2, img.h = 2;
  img.px.resize(11);
  EXPECT_NE(test::error_of([&] { encode_png(img); }).find("2x2"), std::string::npos);
  img.px.resize(12);
  EXPECT_NE(test::error_of([&] { encode_png(img, {{"", "x"}}); }).find("text key"), std::string::npos);
  EXPECT_NE(test::error_of([&] { decode_png("GIF89a....", nullptr, "x.gif"); }).find("x.gif: not a PNG"),
            std::string::npos);
  std::string good = encode_png(img);
  EXPECT_NE(test::error_of([&] { decode_png(good.substr(0, 40), nullptr, "cut.png"); }).find("cut.png"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] { to_rgb8(Map(1, 2, 2, 4)); }).find("4 channels"), std::string::npos);
}
