// Image generation in the server: the painters loaded at start (`kvad serve --image-model DIR`),
// OpenAI's POST /v1/images/generations, and the web UI's streaming POST /kvad/images (progress and
// previews per step). A painter runs beside the language model: each heavy stage (text encoders,
// each UNet call, the VAE) is an exclusive job on the engine thread, so chat streams go on
// between the steps of an image. Internal to src/serve.
#pragma once
#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/json.h"
#include "image/painter.h"
#include "serve/server.h"

namespace kvad::serve {

// Bounds on what one request may ask (each field's error names it).
inline constexpr int64_t kMaxImagesPerRequest = 4;
inline constexpr int64_t kMaxImageSide = 2048;
inline constexpr int64_t kMaxImageSteps = 150;
inline constexpr size_t kMaxImagePromptBytes = 4000;  // CLIP keeps 75 tokens; BPE's cost grows with a word's length

struct ImageRequest {
  std::string model, prompt;
  std::optional<std::string> negative;
  int64_t n = 1, width = 0, height = 0, steps = 20;
  double guidance = 7.5;
  std::optional<uint64_t> seed;  // absent: a random one, reported back
  image::Sampler sampler = image::Sampler::Euler;
  bool previews = false;  // /kvad/images: a preview PNG with each step's event
  bool stream = false;    // /v1/images/generations: OpenAI's image_generation.* events
  int64_t partial_images = 0;  // with stream: that many previews (0-3) before each finished image
};

// The images painted since the server started, newest first, for the UI's gallery: at most
// kMaxEntries and kMaxBytes of PNG (the oldest go first).
class Gallery {
 public:
  static constexpr size_t kMaxEntries = 100, kMaxBytes = size_t(256) << 20;
  struct Entry {
    int64_t id = 0;  // set by add
    std::string model, parameters, prompt;
    uint64_t seed = 0;
    int64_t width = 0, height = 0, created = 0;
    std::string png;
  };
  int64_t add(Entry e);  // its id
  Json list() const;  // without the PNGs: each has its url
  std::optional<std::string> png(int64_t id) const;

 private:
  mutable std::mutex mu_;
  std::deque<Entry> entries_;
  size_t bytes_ = 0;
  int64_t next_id_ = 1;
};

// OpenAI's fields (model, prompt, n, size "WxH", response_format "b64_json") and kvad's
// (negative_prompt, steps, guidance_scale, seed, sampler); `url` responses are refused (kvad keeps
// no files to link to).
ImageRequest parse_image_request(const std::string& body);

// The painters the server holds, by id (the folder's name).
class ImageModels {
 public:
  // Loads each model (a folder, a store or Hub name, or a single file with `base`: runtime/image_model.h);
  // throws naming the one that fails. Its id is the folder's (or file's, or repo's) name.
  void load(const std::vector<std::string>& names, const std::string& base, WeightFormat fmt = WeightFormat::F32);
  // By id; "" = the only one. HttpError 404 naming what exists otherwise.
  std::shared_ptr<const image::Painter> find(const std::string& id, std::string& id_out) const;
  Json list() const;  // [{id, kind, default_size, size_multiple, weights, resident_bytes}]
  bool empty() const { return painters_.empty(); }
  // What the painters hold in memory: the resident bytes each load added (the process's RSS
  // before and after; the file pages a load released are not counted).
  size_t resident_bytes() const;
  // The working memory of the most demanding default-size painting (the startup check).
  size_t default_working_bytes() const;

  Gallery gallery;
  std::atomic<int> in_flight{0};
  int max_in_flight = 4;  // requests painting or waiting; 429 beyond

 private:
  std::map<std::string, std::shared_ptr<const image::Painter>> painters_;
  std::map<std::string, size_t> resident_;
};

// The server's one memory budget (--memory; default 90% of the machine's): the language model's
// weights and KV pool, the painters' weights and one painting's working memory must fit in it.
// Checked at start (a clear error listing each part) and for each image request (a 400 on 'size'
// saying what the size would need and what is left), so a large picture is refused rather than
// taking the process, and every chat in it, down with it.
struct MemoryBudget {
  size_t limit = 0;
  size_t language_model = 0;  // weights + KV pool, as loaded now
  size_t images = 0;          // the painters' resident bytes
  size_t left() const { return limit > language_model + images ? limit - language_model - images : 0; }
  std::string describe() const;  // "the language model (X) and the image models (Y) leave Z of the budget (B, --memory)"
};
// The budget as it stands now (the language model can be swapped from the UI).
MemoryBudget memory_budget(Server::Impl& s);

}  // namespace kvad::serve
