// Image routes (images.h): OpenAI's POST /v1/images/generations, the UI's streaming POST
// /kvad/images, GET /kvad/images/models.
#include "serve/images.h"

#include <chrono>
#include <filesystem>
#include <random>

#include "core/base64.h"
#include "core/error.h"
#include "runtime/image_model.h"
#include "io/download.h"  // format_bytes
#include "serve/fn_job.h"
#include "serve/metrics.h"
#include "serve/request_fields.h"
#include "serve/request_log.h"
#include "serve/server_impl.h"

namespace kvad::serve {

namespace {

std::string bounded_text(const Json& j, const char* key) {
  std::string s = get_string(j, key);
  if (s.size() > kMaxImagePromptBytes)
    bad(key, fmt::format("'{}' has {} bytes; at most {} (the text encoder reads 75 tokens)", key, s.size(), kMaxImagePromptBytes));
  return s;
}

// "WxH" with both sides 1 .. kMaxImageSide; the painter checks the model's multiple.
void parse_size(const std::string& size, ImageRequest& r) {
  int64_t w = 0, h = 0;
  size_t x = size.find('x');
  auto digits = [](const std::string& s) { return !s.empty() && s.size() <= 5 && s.find_first_not_of("0123456789") == std::string::npos; };
  if (x != std::string::npos && digits(size.substr(0, x)) && digits(size.substr(x + 1))) {
    w = std::stoll(size.substr(0, x));
    h = std::stoll(size.substr(x + 1));
  }
  if (w < 1 || h < 1 || w > kMaxImageSide || h > kMaxImageSide)
    bad("size", fmt::format("'size' must be WIDTHxHEIGHT with each side from 1 to {}, like \"512x512\", got '{}'", kMaxImageSide,
                            size.substr(0, 40)));
  r.width = w, r.height = h;
}

}  // namespace

ImageRequest parse_image_request(const std::string& body) {
  Json j = parse_request_body(body);
  ImageRequest r;
  if (has(j, "model")) r.model = get_string(j, "model");
  if (!has(j, "prompt")) bad("prompt", "'prompt' is required");
  r.prompt = bounded_text(j, "prompt");
  if (has(j, "negative_prompt")) r.negative = bounded_text(j, "negative_prompt");
  if (has(j, "n")) r.n = get_int(j, "n", 1, kMaxImagesPerRequest);
  if (has(j, "size")) parse_size(get_string(j, "size"), r);
  if (has(j, "steps")) r.steps = get_int(j, "steps", 1, kMaxImageSteps);
  if (has(j, "guidance_scale")) r.guidance = get_number(j, "guidance_scale", 0, 30);
  if (has(j, "seed")) r.seed = (uint64_t)get_int(j, "seed", 0, (int64_t(1) << 53) - 1);
  if (has(j, "sampler")) {
    std::string s = get_string(j, "sampler");
    if (s == "euler") r.sampler = image::Sampler::Euler;
    else if (s == "euler_a") r.sampler = image::Sampler::EulerAncestral;
    else bad("sampler", fmt::format("'sampler' must be euler or euler_a, got '{}'", s.substr(0, 40)));
  }
  if (has(j, "response_format")) {
    std::string f = get_string(j, "response_format");
    if (f == "url") bad("response_format", "'response_format' url is not offered: kvad keeps no image files to link to; use b64_json");
    if (f != "b64_json") bad("response_format", fmt::format("'response_format' must be b64_json, got '{}'", f.substr(0, 40)));
  }
  if (has(j, "previews")) r.previews = get_bool(j, "previews");
  if (has(j, "stream")) r.stream = get_bool(j, "stream");
  if (has(j, "partial_images")) r.partial_images = get_int(j, "partial_images", 0, 3);
  return r;
}

void ImageModels::load(const std::vector<std::string>& names, const std::string& base, WeightFormat fmt) {
  for (const std::string& n : names) {
    try {
      ImageModelRef ref = resolve_image_model(n);
      if (painters_.count(ref.name)) fail("another image model is already served as '{}'", ref.name);
      const size_t before = rss_bytes();
      painters_[ref.name] = load_painter(n, base, fmt);
      const size_t after = rss_bytes();
      resident_[ref.name] = after > before ? after - before : 0;
    } catch (const Error& e) {
      fail("--image-model {}: {}", n, e.what());
    }
  }
}

std::shared_ptr<const image::Painter> ImageModels::find(const std::string& id, std::string& id_out) const {
  if (painters_.empty())
    throw HttpError(404, "this server has no image model: start it with --image-model DIR", "invalid_request_error", "model",
                    "model_not_found");
  if (id.empty() && painters_.size() == 1) {
    id_out = painters_.begin()->first;
    return painters_.begin()->second;
  }
  auto it = painters_.find(id);
  if (it == painters_.end()) {
    std::string names;
    for (const auto& [k, v] : painters_) names += (names.empty() ? "" : ", ") + k;
    throw HttpError(404, fmt::format("no image model '{}' here; this server has: {}", id.substr(0, 80), names),
                    "invalid_request_error", "model", "model_not_found");
  }
  id_out = it->first;
  return it->second;
}

Json ImageModels::list() const {
  Json out = Json::array();
  for (const auto& [id, p] : painters_)
    out.push_back({{"id", id},
                   {"kind", image::pipeline_kind_name(p->kind())},
                   {"default_size", p->default_size()},
                   {"size_multiple", p->size_multiple()},
                   {"weights", p->formats().describe()},
                   {"resident_bytes", resident_.count(id) ? resident_.at(id) : 0}});
  return out;
}

size_t ImageModels::resident_bytes() const {
  size_t total = 0;
  for (const auto& [id, b] : resident_) total += b;
  return total;
}

size_t ImageModels::default_working_bytes() const {
  size_t most = 0;
  for (const auto& [id, p] : painters_) most = std::max(most, p->working_bytes(p->default_size(), p->default_size()));
  return most;
}

std::string MemoryBudget::describe() const {
  return fmt::format("the language model ({}) and the image models ({}) leave {} of the server's memory budget ({}, --memory)",
                     format_bytes(language_model), format_bytes(images), format_bytes(left()), format_bytes(limit));
}

int64_t Gallery::add(Entry e) {
  std::lock_guard<std::mutex> lk(mu_);
  const int64_t id = e.id = next_id_++;
  bytes_ += e.png.size();
  entries_.push_front(std::move(e));
  while (entries_.size() > 1 && (entries_.size() > kMaxEntries || bytes_ > kMaxBytes)) {
    bytes_ -= entries_.back().png.size();
    entries_.pop_back();
  }
  return id;
}

Json Gallery::list() const {
  std::lock_guard<std::mutex> lk(mu_);
  Json out = Json::array();
  for (const Entry& e : entries_)
    out.push_back({{"id", e.id}, {"model", e.model}, {"prompt", e.prompt}, {"parameters", e.parameters}, {"seed", e.seed},
                   {"width", e.width}, {"height", e.height}, {"created", e.created},
                   {"url", fmt::format("/kvad/images/gallery/{}.png", e.id)}});
  return out;
}

std::optional<std::string> Gallery::png(int64_t id) const {
  std::lock_guard<std::mutex> lk(mu_);
  for (const Entry& e : entries_)
    if (e.id == id) return e.png;
  return std::nullopt;
}

namespace {

// One request's hold on a painting slot: 429 past ImageModels::max_in_flight.
struct ImageSlot {
  ImageModels& m;
  explicit ImageSlot(ImageModels& models) : m(models) {
    if (++m.in_flight > m.max_in_flight) {
      --m.in_flight;
      throw HttpError(429, fmt::format("{} image requests are already painting or waiting; try again later", m.max_in_flight),
                      "rate_limit_error", "", "busy");
    }
  }
  ~ImageSlot() { --m.in_flight; }
};

struct Painted {
  std::string png;  // the file's bytes
  std::string parameters;  // the A1111 text in it
  int64_t gallery_id = 0;
  uint64_t seed = 0;
  image::PaintResult result;
};

// Paints request `r`'s image number `i` with the stages on the engine thread. `gone` says the
// client left (checked before each stage); `on_step` reports progress.
image::PaintRequest paint_request(const ImageRequest& r, uint64_t seed) {
  image::PaintRequest pr;
  pr.prompt = r.prompt;
  pr.negative = r.negative;
  pr.width = r.width, pr.height = r.height;
  pr.steps = r.steps;
  pr.guidance = r.guidance;
  pr.sampler = r.sampler;
  pr.seed = seed;
  return pr;
}

Painted paint_one(Server::Impl& s, const image::Painter& p, const std::string& model_id, const ImageRequest& r, int64_t i,
                  uint64_t seed, const std::function<bool()>& gone, const image::StepCallback& on_step) {
  image::PaintRequest pr = paint_request(r, seed + (uint64_t)i);
  pr.run_stage = [&](const std::function<void()>& work) {
    if (s.stopping) throw HttpError(503, "the server is shutting down", "server_error", "", "shutting_down");
    if (gone()) throw HttpError(499, "the client went away", "invalid_request_error");
    auto job = std::make_shared<FnJob>("image", [&](ModelHost&) -> Json {
      work();
      return nullptr;
    });
    run_and_wait(s, job);
  };
  Painted out;
  out.seed = pr.seed;
  out.result = p.paint(pr, on_step);
  image::GenerationParams gp;
  gp.prompt = r.prompt;
  gp.negative = r.negative.value_or("");
  gp.sampler = r.sampler == image::Sampler::Euler ? "Euler" : "Euler a";
  gp.model = model_id;
  gp.steps = r.steps, gp.width = out.result.width, gp.height = out.result.height;
  gp.guidance = r.guidance, gp.seed = pr.seed;
  out.parameters = image::a1111_parameters(gp);
  out.png = image::encode_png(out.result.rgb, {{"parameters", out.parameters}});
  out.gallery_id = s.images.gallery.add({0, model_id, image::a1111_parameters(gp), r.prompt, out.seed, out.result.width, out.result.height,
                        (int64_t)std::time(nullptr), out.png});
  return out;
}

}  // namespace

MemoryBudget memory_budget(Server::Impl& s) {
  MemoryBudget b;
  b.limit = s.opts.memory_bytes;
  b.language_model = s.sched.stats().weight_bytes.load() + s.sched.stats().kv_capacity_bytes.load();
  b.images = s.images.resident_bytes();
  return b;
}

namespace {

// The model's own constraint on the size (a multiple of its UNet and VAE strides) and the memory
// budget's, as a 400 on 'size'.
void check_size(Server::Impl& s, const image::Painter& p, const ImageRequest& r) {
  image::PaintRequest pr;
  try {
    pr = p.checked(paint_request(r, 0));
  } catch (const Error& e) {
    bad("size", e.what());
  }
  const MemoryBudget b = memory_budget(s);
  const size_t need = p.working_bytes(pr.width, pr.height);
  if (b.limit && need > b.left())
    bad("size", fmt::format("painting {}x{} needs about {} of working memory; {}: ask for a smaller size", pr.width,
                            pr.height, format_bytes(need), b.describe()));
}

uint64_t seed_of(const ImageRequest& r) {
  if (r.seed) return *r.seed;
  std::random_device rd;
  return (((uint64_t)rd() << 32) | rd()) & ((uint64_t(1) << 53) - 1);  // a JSON-safe integer
}

Json timings_json(const image::PaintTimings& t) {
  return {{"text_encode_seconds", t.text_encode}, {"denoise_seconds", t.denoise}, {"decode_seconds", t.decode}};
}

void sse_write(httplib::DataSink& sink, const Json& event) {
  std::string data = "data: " + dump(event) + "\n\n";
  if (!sink.write(data.data(), data.size())) throw HttpError(499, "the client went away", "invalid_request_error");
}


// How a stream's events are shaped: the UI's (progress every step, kvad's names) or OpenAI's
// image_generation.partial_image / .completed.
enum class StreamShape { Ui, OpenAI };

// Paints every image of `r`, writing events to `sink` as they come; an error after the first event
// is an {error} event (the status is already sent).
bool stream_images(Server::Impl& s, const ImageRequest& r, const std::string& id, const image::Painter& painter,
                   uint64_t seed, StreamShape shape, httplib::DataSink& sink) {
  const std::string size = fmt::format("{}x{}", r.width ? r.width : painter.default_size(), r.height ? r.height : painter.default_size());
  try {
    for (int64_t i = 0; i < r.n; i++) {
      int64_t partials_sent = 0;
      auto on_step = [&](const image::StepReport& st) {
        const double eta = st.elapsed / double(st.step + 1) * double(st.total - st.step - 1);
        if (shape == StreamShape::Ui) {
          Json ev = {{"image", i}, {"step", st.step + 1}, {"total", st.total}, {"seconds", st.elapsed}, {"eta_seconds", eta}};
          if (r.previews) ev["preview"] = base64_encode(image::encode_png(painter.preview(*st.denoised, 2)));
          sse_write(sink, ev);
          return;
        }
        // partial_images of them, evenly spread over the steps, each the image as far as it is (a preview).
        if (partials_sent < r.partial_images && (st.step + 1) * (r.partial_images + 1) >= (partials_sent + 1) * st.total) {
          sse_write(sink, {{"type", "image_generation.partial_image"}, {"partial_image_index", partials_sent++},
                           {"b64_json", base64_encode(image::encode_png(painter.preview(*st.denoised, painter.vae_factor())))},
                           {"created_at", (int64_t)std::time(nullptr)}, {"size", size}, {"output_format", "png"},
                           {"image_index", i}, {"step", st.step + 1}, {"total", st.total}, {"eta_seconds", eta}});
        }
      };
      Painted p = paint_one(s, painter, id, r, i, seed, [] { return false; }, on_step);
      if (shape == StreamShape::Ui)
        sse_write(sink, {{"image", i}, {"png", base64_encode(p.png)}, {"seed", p.seed}, {"width", p.result.width},
                         {"height", p.result.height}, {"timings", timings_json(p.result.timings)},
                         {"gallery_id", p.gallery_id}, {"parameters", p.parameters}, {"prompt", r.prompt}});
      else
        sse_write(sink, {{"type", "image_generation.completed"}, {"b64_json", base64_encode(p.png)},
                         {"created_at", (int64_t)std::time(nullptr)}, {"size", size}, {"output_format", "png"},
                         {"image_index", i}, {"seed", p.seed}, {"timings", timings_json(p.result.timings)}});
    }
    if (shape == StreamShape::Ui) sse_write(sink, {{"done", true}, {"model", id}});
    sink.done();
    return true;
  } catch (const HttpError& e) {
    if (e.status == 499) return false;  // nobody to tell
    std::string data = "data: " + dump(error_json(e)) + "\n\n";
    sink.write(data.data(), data.size());
  } catch (const Error& e) {
    std::string data = "data: " + dump(error_json(e.what(), "server_error")) + "\n\n";
    sink.write(data.data(), data.size());
  }
  sink.done();
  return false;
}

// Checks the request against the model, takes a painting slot and streams the images.
void start_stream(Server::Impl& s, const ImageRequest& r, StreamShape shape, httplib::Response& res) {
  std::string id;
  auto painter = s.images.find(r.model, id);
  check_size(s, *painter, r);  // a 400 now, not an event mid-stream
  auto slot = std::make_shared<ImageSlot>(s.images);
  const uint64_t seed = seed_of(r);
  Server::Impl* sp = &s;
  res.set_chunked_content_provider("text/event-stream", [sp, r, id, painter, slot, seed, shape](size_t, httplib::DataSink& sink) {
    return stream_images(*sp, r, id, *painter, seed, shape, sink);
  });
}

}  // namespace

void add_image_routes(Server::Impl& s) {
  GuardedHttp& h = s.http;
  h.Get("/kvad/images/models", [&s](const httplib::Request&, httplib::Response& res) {
    reply_json(res, {{"models", s.images.list()}});
  });
  // The images painted since the server started (newest first, a bounded number), and each PNG.
  h.Get("/kvad/images/gallery", [&s](const httplib::Request&, httplib::Response& res) {
    reply_json(res, {{"images", s.images.gallery.list()}});
  });
  h.Get(R"(/kvad/images/gallery/(\d{1,9})\.png)", [&s](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] {
      auto png = s.images.gallery.png(std::stoll(req.matches[1].str()));
      if (!png) throw HttpError(404, "no such image in the gallery (it keeps the latest ones only)", "invalid_request_error");
      res.set_content(*png, "image/png");
    });
  });
  // OpenAI's: every image whole in data[].b64_json (plus kvad's seed and timings per image); with
  // "stream": true, OpenAI's image_generation.partial_image (partial_images of them) and
  // image_generation.completed events.
  h.Post("/v1/images/generations", [&s](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] {
      ImageRequest r = parse_image_request(req.body);
      if (r.stream) return start_stream(s, r, StreamShape::OpenAI, res);
      std::string id;
      auto painter = s.images.find(r.model, id);
      check_size(s, *painter, r);
      ImageSlot slot(s.images);
      const uint64_t seed = seed_of(r);
      Json data = Json::array();
      for (int64_t i = 0; i < r.n; i++) {
        Painted p = paint_one(s, *painter, id, r, i, seed, [] { return GuardedHttp::client_gone(); }, {});
        data.push_back({{"b64_json", base64_encode(p.png)}, {"revised_prompt", r.prompt}, {"seed", p.seed},
                        {"timings", timings_json(p.result.timings)}});
      }
      reply_json(res, {{"created", (int64_t)std::time(nullptr)}, {"model", id}, {"data", data}});
    });
  });
  // The UI's: a server-sent event per step ({step, total, seconds, eta_seconds[, preview]}), then
  // one per image ({png: base64, seed, timings}), then {done: true}; an error after the first event
  // comes as {error: {...}}.
  h.Post("/kvad/images", [&s](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] { start_stream(s, parse_image_request(req.body), StreamShape::Ui, res); });
  });
}

}  // namespace kvad::serve
