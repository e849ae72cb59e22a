// PNG files of generated images (libpng): 8-bit RGB, with text chunks. The generation parameters go
// in a `parameters` chunk in the form AUTOMATIC1111's web UI writes and other tools (ComfyUI's
// loaders, image viewers, civitai) read:
//   a red fox in fresh snow
//   Negative prompt: blurry
//   Steps: 20, Sampler: Euler a, CFG scale: 7.5, Seed: 1, Size: 512x512, Model: sd15
// A text that is Latin-1-safe ASCII is a tEXt chunk (what A1111 / PIL write); one with other
// characters an uncompressed iTXt chunk (UTF-8), as PIL's PngInfo.add_text does then.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "image/nn.h"

namespace kvad::image {

struct Rgb8 {
  int64_t w = 0, h = 0;
  std::vector<uint8_t> px;  // [h, w, 3], rows top to bottom
};

// One image of a decoded batch (values in [-1, 1], [n, h, w, 3]) as diffusers' pipelines turn it
// into pixels: clamp(x / 2 + 0.5, 0, 1) * 255, rounded half to even (numpy's round), in float32.
Rgb8 to_rgb8(const Map& image, int64_t index = 0);

using PngText = std::vector<std::pair<std::string, std::string>>;  // key (1-79 Latin-1 bytes), text

// The PNG's bytes (in memory).
std::string encode_png(const Rgb8& img, const PngText& text = {});
// encode_png, written atomically (a temporary file renamed over `path`).
void write_png(const std::string& path, const Rgb8& img, const PngText& text = {});

// Reads an 8-bit RGB PNG back (the tests, previews' checks); `text` gets its tEXt/iTXt/zTXt chunks.
Rgb8 decode_png(const std::string& bytes, std::map<std::string, std::string>* text = nullptr,
                const std::string& what = "png");

// The A1111 `parameters` text. `negative` empty: no "Negative prompt:" line.
struct GenerationParams {
  std::string prompt, negative, sampler = "Euler", model;
  int64_t steps = 0, width = 0, height = 0;
  double guidance = 7.5;
  uint64_t seed = 0;
};
std::string a1111_parameters(const GenerationParams& p);

}  // namespace kvad::image
