#include "runtime/image_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <random>

#include "core/error.h"
#include "core/fs.h"
#include "core/json.h"
#include "image/painter.h"
#include "image/unet.h"
#include "image/vae.h"

namespace kvad {

namespace {

using clock_type = std::chrono::steady_clock;

double since(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }

std::vector<float> normal(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> nd;
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

// One timed call of a loaded part.
struct Subject {
  ImageBenchRun run;
  std::function<void()> call;
};

}  // namespace

std::vector<ImageBenchRun> bench_image_parts(const ImageBenchOptions& o) {
  if (o.unet_dir.empty() && o.vae_dir.empty()) fail("kvad bench images: give --unet DIR and/or --vae DIR");
  std::mt19937 rng(1);
  std::vector<Subject> subjects;
  std::vector<std::unique_ptr<image::Unet>> unets;
  std::vector<std::unique_ptr<image::Vae>> vaes;
  int64_t size = o.image_size;
  // Inputs shared by every format, made once the first model says its sizes.
  auto latents = std::make_shared<image::Map>();
  auto context = std::make_shared<std::vector<float>>();
  auto pooled = std::make_shared<std::vector<float>>();
  auto time_ids = std::make_shared<std::vector<float>>();
  auto vae_in = std::make_shared<image::Map>();
  for (WeightFormat f : o.formats) {
    if (o.unet_dir.empty()) break;
    auto t0 = clock_type::now();
    unets.push_back(image::Unet::load(o.unet_dir, f));
    const double load_s = since(t0);
    const image::UnetConfig& c = unets.back()->config();
    if (latents->v.empty()) {
      if (size == 0) {
        std::string cfg = join_path(o.unet_dir, "config.json");
        size = 8 * json_int_or(read_json_file(cfg), "sample_size", 64, cfg);
      }
      const int64_t side = size / 8, mult = int64_t(1) << (c.block_out_channels.size() - 1);
      if (size % 8 || side % mult) fail("--size {}: the UNet needs a multiple of {}", size, 8 * mult);
      *latents = image::Map(o.batch, side, side, c.in_channels);
      latents->v = normal(latents->v.size(), rng);
      *context = normal((size_t)(o.batch * o.tokens * c.cross_attention_dim), rng);
      if (c.addition_time_embed_dim) {
        *pooled = normal((size_t)(o.batch * (c.projection_class_embeddings_input_dim - 6 * c.addition_time_embed_dim)), rng);
        for (int64_t b = 0; b < o.batch; b++)
          for (float v : {(float)size, (float)size, 0.0f, 0.0f, (float)size, (float)size}) time_ids->push_back(v);
      }
    }
    const image::Unet* u = unets.back().get();
    Subject s;
    s.run.part = "unet";
    s.run.format = f;
    s.run.load_s = load_s;
    s.call = [u, latents, context, pooled, time_ids, &o] {
      image::UnetInput in;
      in.latents = latents.get();
      in.timestep = 501;
      in.context = context->data();
      in.tokens = o.tokens;
      if (!pooled->empty()) in.pooled = pooled->data(), in.time_ids = time_ids->data();
      image::Map eps = u->predict(in);
      if (eps.v.empty() || !std::isfinite(eps.v[0])) fail("kvad bench images: the UNet's output is not finite");
    };
    subjects.push_back(std::move(s));
  }
  // The VAE in the format the painter gives it for each --quant (bf16 for q8), each once.
  std::vector<WeightFormat> vae_formats;
  for (WeightFormat q : o.formats) {
    WeightFormat f = image::PartFormats::for_quant(q).vae;
    if (std::find(vae_formats.begin(), vae_formats.end(), f) == vae_formats.end()) vae_formats.push_back(f);
  }
  for (WeightFormat f : vae_formats) {
    if (o.vae_dir.empty()) break;
    auto t0 = clock_type::now();
    vaes.push_back(image::Vae::load(o.vae_dir, f));
    const double load_s = since(t0);
    if (vae_in->v.empty()) {
      if (size == 0) size = 512;
      if (size % 8) fail("--size {}: a multiple of 8", size);
      *vae_in = image::Map(1, size / 8, size / 8, vaes.back()->config().latent_channels);
      vae_in->v = normal(vae_in->v.size(), rng);
    }
    const image::Vae* v = vaes.back().get();
    Subject s;
    s.run.part = "vae";
    s.run.format = f;
    s.run.load_s = load_s;
    s.call = [v, vae_in] {
      image::Map img = v->decode(*vae_in);
      if (img.v.empty() || !std::isfinite(img.v[0])) fail("kvad bench images: the VAE's output is not finite");
    };
    subjects.push_back(std::move(s));
  }
  for (int w = 0; w < o.warmup; w++)
    for (Subject& s : subjects) s.call();
  for (int r = 0; r < o.reps; r++)
    for (Subject& s : subjects) {
      ForeignCpu foreign;
      auto t0 = clock_type::now();
      s.call();
      s.run.reps.push_back(since(t0));
      s.run.other_cores = std::max(s.run.other_cores, foreign.cores_since());
    }
  std::vector<ImageBenchRun> out;
  for (Subject& s : subjects) {
    s.run.seconds = stats_of(s.run.reps);
    out.push_back(std::move(s.run));
  }
  return out;
}

}  // namespace kvad
