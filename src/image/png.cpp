// PNG writing and reading through libpng (png.h). libpng reports errors by longjmp: each function
// below keeps what lives across its setjmp in plain pointers set before it, and turns a jump into
// a kvad::Error after libpng's structures are freed.
#include "image/png.h"

#include <png.h>

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstring>

#include "core/error.h"
#include "core/fs.h"

namespace kvad::image {

Rgb8 to_rgb8(const Map& image, int64_t index) {
  if (image.c != 3) fail("to_rgb8: an image of {} channels (RGB has 3)", image.c);
  if (index < 0 || index >= image.n) fail("to_rgb8: image {} of a batch of {}", index, image.n);
  Rgb8 out;
  out.w = image.w, out.h = image.h;
  out.px.resize((size_t)(image.w * image.h * 3));
  const float* src = image.at(index, 0, 0);
  for (size_t i = 0; i < out.px.size(); i++) {
    float v = std::clamp(src[i] / 2.0f + 0.5f, 0.0f, 1.0f) * 255.0f;  // float32, as the pipeline's tensors
    out.px[i] = (uint8_t)std::nearbyint(v);  // the default rounding mode: half to even, as numpy's round
  }
  return out;
}

namespace {

struct PngError {
  char message[256] = "";
};

void on_error(png_structp png, png_const_charp msg) {
  auto* e = static_cast<PngError*>(png_get_error_ptr(png));
  std::snprintf(e->message, sizeof e->message, "%s", msg ? msg : "libpng error");
  png_longjmp(png, 1);
}
void on_warning(png_structp, png_const_charp) {}

void on_write(png_structp png, png_bytep data, size_t n) {
  static_cast<std::string*>(png_get_io_ptr(png))->append(reinterpret_cast<const char*>(data), n);
}
void on_flush(png_structp) {}

struct Reader {
  const std::string* bytes;
  size_t at = 0;
};
void on_read(png_structp png, png_bytep data, size_t n) {
  auto* r = static_cast<Reader*>(png_get_io_ptr(png));
  if (n > r->bytes->size() - r->at) png_error(png, "the file ends inside the image");
  std::memcpy(data, r->bytes->data() + r->at, n);
  r->at += n;
}

bool is_ascii(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return (unsigned char)c < 0x80 && c != 0; });
}

// The part of encode_png that libpng may leave by longjmp, in a frame of its own that owns
// nothing (GCC warned that encode_png's vectors might be clobbered across the setjmp there).
// False when libpng jumped out (its message in the error struct).
bool write_rows(png_structp png, png_infop info, const Rgb8& img, png_bytep* rows, png_text* chunks, int n_chunks,
                std::string* out) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_write_fn(png, out, on_write, on_flush);
  png_set_IHDR(png, info, (png_uint_32)img.w, (png_uint_32)img.h, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (n_chunks > 0) png_set_text(png, info, chunks, n_chunks);
  png_set_rows(png, info, rows);
  png_write_png(png, info, PNG_TRANSFORM_IDENTITY, nullptr);
  return true;
}

}  // namespace

std::string encode_png(const Rgb8& img, const PngText& text) {
  if (img.w < 1 || img.h < 1 || img.w > (1 << 20) || img.h > (1 << 20) || img.px.size() != (size_t)(img.w * img.h * 3))
    fail("encode_png: a {}x{} image with {} bytes of pixels", img.w, img.h, img.px.size());
  for (const auto& [key, value] : text)
    if (key.empty() || key.size() > 79 || !is_ascii(key))
      fail("encode_png: text key '{}' must be 1 to 79 ASCII characters", key);
  std::string out;
  PngError err;
  std::vector<png_bytep> rows((size_t)img.h);
  for (int64_t y = 0; y < img.h; y++) rows[(size_t)y] = const_cast<png_bytep>(img.px.data() + y * img.w * 3);
  std::vector<png_text> chunks(text.size());
  for (size_t i = 0; i < text.size(); i++) {
    png_text& t = chunks[i];
    std::memset(&t, 0, sizeof t);
    t.key = const_cast<png_charp>(text[i].first.c_str());
    t.text = const_cast<png_charp>(text[i].second.c_str());
    t.text_length = text[i].second.size();
    // tEXt holds Latin-1; anything beyond ASCII goes in iTXt as UTF-8 (PIL's choice too).
    t.compression = is_ascii(text[i].second) ? PNG_TEXT_COMPRESSION_NONE : PNG_ITXT_COMPRESSION_NONE;
    if (t.compression == PNG_ITXT_COMPRESSION_NONE) t.itxt_length = t.text_length, t.text_length = 0;
  }
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &err, on_error, on_warning);
  if (!png) fail("encode_png: out of memory");
  png_infop info = png_create_info_struct(png);
  const bool written = info && write_rows(png, info, img, rows.data(), chunks.data(), (int)chunks.size(), &out);
  png_destroy_write_struct(&png, info ? &info : nullptr);
  if (!written) fail("encode_png: {}", err.message[0] ? err.message : "out of memory");
  return out;
}

void write_png(const std::string& path, const Rgb8& img, const PngText& text) {
  atomic_write_file(path, encode_png(img, text));
}

Rgb8 decode_png(const std::string& bytes, std::map<std::string, std::string>* text, const std::string& what) {
  if (bytes.size() < 8 || png_sig_cmp(reinterpret_cast<png_const_bytep>(bytes.data()), 0, 8))
    fail("{}: not a PNG file", what);
  Rgb8 img;
  PngError err;
  Reader reader{&bytes};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &err, on_error, on_warning);
  if (!png) fail("{}: out of memory", what);
  png_infop info = png_create_info_struct(png);
  if (!info || setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, info ? &info : nullptr, nullptr);
    fail("{}: {}", what, err.message[0] ? err.message : "out of memory");
  }
  png_set_read_fn(png, &reader, on_read);
  png_set_user_limits(png, 1 << 16, 1 << 16);
  png_read_png(png, info, PNG_TRANSFORM_IDENTITY, nullptr);
  png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
  bool rgb8 = png_get_bit_depth(png, info) == 8 && png_get_color_type(png, info) == PNG_COLOR_TYPE_RGB;
  if (rgb8) {
    img.w = w, img.h = h;
    img.px.resize((size_t)w * h * 3);
    png_bytepp rows = png_get_rows(png, info);
    for (png_uint_32 y = 0; y < h; y++) std::memcpy(img.px.data() + (size_t)y * w * 3, rows[y], (size_t)w * 3);
    png_textp t = nullptr;
    int n = 0;
    if (text && png_get_text(png, info, &t, &n) > 0)
      for (int i = 0; i < n; i++)
        (*text)[t[i].key] = std::string(t[i].text, t[i].compression >= PNG_ITXT_COMPRESSION_NONE ? t[i].itxt_length
                                                                                                   : t[i].text_length);
  }
  png_destroy_read_struct(&png, &info, nullptr);
  if (!rgb8) fail("{}: not an 8-bit RGB PNG", what);
  return img;
}

std::string a1111_parameters(const GenerationParams& p) {
  std::string s = p.prompt;
  if (!p.negative.empty()) s += "\nNegative prompt: " + p.negative;
  s += fmt::format("\nSteps: {}, Sampler: {}, CFG scale: {:g}, Seed: {}, Size: {}x{}", p.steps, p.sampler, p.guidance,
                   p.seed, p.width, p.height);
  if (!p.model.empty()) s += ", Model: " + p.model;
  return s;
}

}  // namespace kvad::image
