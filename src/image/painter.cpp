// The painter (painter.h): diffusers 0.25.1 StableDiffusionPipeline / StableDiffusionXLPipeline
// __call__ with an Euler(-ancestral) scheduler, float32, in the order diffusers computes.
#include "image/painter.h"

#include <chrono>
#include <cmath>

#include "core/cpu.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/rng.h"
#include "image/single_file.h"

namespace kvad::image {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

PartFormats PartFormats::for_quant(WeightFormat q) {
  if (q != WeightFormat::F32 && q != WeightFormat::BF16 && q != WeightFormat::Q8)
    fail("--quant {}: image models run in f32, bf16 or q8", weight_format_name(q));
  PartFormats f;
  f.unet = q;
  // bf16 VAE products only where the CPU multiplies bf16 (AVX512-BF16): elsewhere its panels are
  // widened in registers, and on AVX2 the decode took 29.7 s at 512x512 where f32 took 21.8
  // (docs/images.md).
  f.vae = q == WeightFormat::F32 || !avx512_bf16_enabled() ? WeightFormat::F32 : WeightFormat::BF16;
  f.text = q == WeightFormat::F32 ? WeightFormat::AsStored : q;
  return f;
}

std::string PartFormats::describe() const {
  return fmt::format("UNet {}, VAE {}, text encoders {}", weight_format_name(unet), weight_format_name(vae),
                     text == WeightFormat::AsStored ? "as stored" : weight_format_name(text));
}

Painter::~Painter() = default;

std::unique_ptr<Painter> Painter::load(const std::string& dir, WeightFormat fmt) {
  std::unique_ptr<Painter> p(new Painter());
  p->formats_ = PartFormats::for_quant(fmt);
  p->folder_ = read_pipeline_folder(dir);
  const PipelineFolder& f = p->folder_;
  p->text_ = PromptEncoder::load(f, {}, p->formats_.text);
  p->unet_ = Unet::load(f.part("unet").dir, p->formats_.unet);
  p->vae_ = Vae::load(f.part("vae").dir, p->formats_.vae);
  p->finish_load(dir);
  return p;
}

std::unique_ptr<Painter> Painter::load_single_file(const std::string& file, const std::string& base_dir, WeightFormat fmt) {
  std::unique_ptr<Painter> p(new Painter());
  p->formats_ = PartFormats::for_quant(fmt);
  p->folder_ = read_pipeline_folder(base_dir);
  const PipelineFolder& f = p->folder_;
  // The file's header read once; its kind first: a base of the other kind would only fail later
  // on some tensor name.
  auto mapped = std::make_shared<SafetensorsFile>(file);
  PipelineKind kind = detect_single_file(*mapped);
  if (kind != f.kind)
    fail("{}: an {} checkpoint, but its base {} is an {} pipeline: give the base it was fine-tuned from", file,
         pipeline_kind_name(kind), base_dir, pipeline_kind_name(f.kind));
  SingleFile sf = place_tensors(mapped->tensors(), mapped, file, layout_from_base(f), /*file_mapped=*/true);
  p->text_ = PromptEncoder::load(f, {sf.text_encoder, sf.text_encoder_2}, p->formats_.text);
  std::string ucfg = join_path(f.part("unet").dir, "config.json"), vcfg = join_path(f.part("vae").dir, "config.json");
  p->unet_ = std::make_unique<Unet>(parse_unet_config(read_json_file(ucfg), ucfg), sf.unet, p->formats_.unet);
  p->vae_ = std::make_unique<Vae>(parse_vae_config(read_json_file(vcfg), vcfg), sf.vae, p->formats_.vae);
  sf.check_all_read();  // every tensor of the file is a weight some part read
  p->finish_load(file);
  return p;
}

void Painter::finish_load(const std::string& dir) {
  const PipelineFolder& f = folder_;
  sched_ = read_scheduler_config(join_path(f.part("scheduler").dir, "scheduler_config.json"));

  // The parts must fit together: what the text side gives is what the UNet takes, the UNet's
  // latents are the VAE's.
  const UnetConfig& u = unet_->config();
  const VaeConfig& v = vae_->config();
  if (u.in_channels != v.latent_channels || u.out_channels != v.latent_channels)
    fail("{}: the UNet takes {} and gives {} latent channels, the VAE has {}", dir, u.in_channels, u.out_channels,
         v.latent_channels);
  int64_t width = 0;
  for (const ClipTextEncoder& e : text_.encoders) width += e.config().hidden;
  if (f.kind == PipelineKind::SD15) width = text_.encoders.at(0).config().hidden;
  if (u.cross_attention_dim != width)
    fail("{}: the UNet's cross_attention_dim is {}, the text encoders give {}", u.source, u.cross_attention_dim, width);
  if (f.kind == PipelineKind::SDXL) {
    int64_t pooled = text_.encoders.at(1).config().projection;
    if (u.addition_time_embed_dim <= 0 || u.projection_class_embeddings_input_dim != pooled + 6 * u.addition_time_embed_dim)
      fail("{}: an SDXL UNet takes the pooled text ({}) and 6 time ids x addition_time_embed_dim ({}): "
           "projection_class_embeddings_input_dim is {}",
           u.source, pooled, u.addition_time_embed_dim, u.projection_class_embeddings_input_dim);
  }
  // The default size: the UNet config's sample_size (latent pixels) times the VAE's factor.
  std::string ucfg = join_path(f.part("unet").dir, "config.json");
  Json uj = read_json_file(ucfg);
  int64_t sample = json_int_or(uj, "sample_size", 64, ucfg);
  if (sample < 1 || sample > 1024) fail("{}: 'sample_size' = {} is outside [1, 1024]", ucfg, sample);
  default_size_ = sample * vae_factor();
  if (default_size_ % size_multiple()) default_size_ = size_multiple();
}

int64_t Painter::vae_factor() const { return int64_t(1) << (vae_->config().block_out_channels.size() - 1); }

size_t Painter::working_bytes(int64_t width, int64_t height) const {
  const double pixels = (double)width * (double)height;
  const double vae = pixels * 5.0 * 4.0 * (double)vae_->config().block_out_channels.at(0);
  const std::vector<int64_t>& ch = unet_->config().block_out_channels;
  double unet = 0;
  const double latent_rows = 2.0 * pixels / double(vae_factor() * vae_factor());  // batch 2: guidance
  for (size_t l = 0; l < ch.size(); l++)
    unet = std::max(unet, latent_rows / double(int64_t(1) << (2 * l)) * 80.0 * (double)ch[l]);
  return (size_t)(1.25 * std::max(vae, unet)) + (size_t(64) << 20);  // + the im2col chunk, scratch
}

int64_t Painter::size_multiple() const {
  return vae_factor() * (int64_t(1) << (unet_->config().block_out_channels.size() - 1));
}

PaintRequest Painter::checked(const PaintRequest& in) const {
  PaintRequest r = in;
  if (r.width == 0) r.width = default_size_;
  if (r.height == 0) r.height = default_size_;
  const int64_t m = size_multiple();
  if (r.width < m || r.height < m || r.width % m || r.height % m || r.width > 8192 || r.height > 8192)
    fail("size {}x{}: width and height must be multiples of {} (this model's UNet and VAE) from {} to 8192", r.width,
         r.height, m, m);
  if (r.steps < 1 || r.steps > 1000) fail("steps {}: must be 1 to 1000", r.steps);
  if (!std::isfinite(r.guidance) || r.guidance < 0 || r.guidance > 100)
    fail("guidance {}: must be a number from 0 to 100", r.guidance);
  if (r.latents) {
    const Map& l = *r.latents;
    int64_t f = vae_factor();
    if (l.n != 1 || l.h != r.height / f || l.w != r.width / f || l.c != vae_->config().latent_channels)
      fail("given latents are [{}, {}, {}, {}]; a {}x{} image needs [1, {}, {}, {}]", l.n, l.h, l.w, l.c, r.width,
           r.height, r.height / f, r.width / f, vae_->config().latent_channels);
  }
  return r;
}

PaintResult Painter::paint(const PaintRequest& req, const StepCallback& on_step) const {
  using clock = std::chrono::steady_clock;
  const PaintRequest r = checked(req);
  PaintResult res;
  res.width = r.width, res.height = r.height;
  const int64_t f = vae_factor(), lh = r.height / f, lw = r.width / f, C = vae_->config().latent_channels;
  const int64_t n = lh * lw * C;
  EulerScheduler sched(sched_, r.sampler, r.steps);  // refuses step counts its spacing cannot make
  Rng rng(r.seed);

  auto stage = [&](const std::function<void()>& work) { r.run_stage ? r.run_stage(work) : work(); };
  auto t0 = clock::now();
  Conditioning cond;
  stage([&] { cond = encode_prompt(text_, r.prompt, r.negative); });
  res.timings.text_encode = seconds_since(t0);

  // Classifier-free guidance: both rows (negative first); without it, the prompt's row alone.
  const bool cfg = r.guidance > 1.0;
  const int64_t batch = cfg ? 2 : 1, row0 = cfg ? 0 : 1;
  std::vector<float> time_ids;
  if (kind() == PipelineKind::SDXL)
    for (int64_t b = 0; b < batch; b++)  // original size, crop top-left, target size: (h, w) each
      time_ids.insert(time_ids.end(), {(float)r.height, (float)r.width, 0.0f, 0.0f, (float)r.height, (float)r.width});
  UnetInput ui;
  ui.context = cond.context.data() + row0 * cond.tokens * cond.width;
  ui.tokens = cond.tokens;
  if (kind() == PipelineKind::SDXL) {
    ui.pooled = cond.pooled.data() + row0 * cond.pooled_width;
    ui.time_ids = time_ids.data();
  }

  // prepare_latents: unit normal noise (or the given latents) x init_noise_sigma.
  Map x(1, lh, lw, C);
  if (r.latents) x.v = r.latents->v;
  else
    for (float& v : x.v) v = (float)rng.normal();
  const float init_sigma = sched.init_noise_sigma();
  for (float& v : x.v) v = v * init_sigma;

  Map in(batch, lh, lw, C), guided(1, lh, lw, C), denoised(1, lh, lw, C);
  std::vector<float> noise;
  const bool ancestral = r.sampler == Sampler::EulerAncestral;
  const bool v_pred = sched_.prediction == SchedulerConfig::Prediction::VPrediction;
  const float g = (float)r.guidance;
  auto t_denoise = clock::now();
  for (int64_t i = 0; i < sched.steps(); i++) {
    auto t_step = clock::now();
    sched.scale_model_input(i, x.v.data(), in.v.data(), n);
    for (int64_t b = 1; b < batch; b++) std::copy(in.v.begin(), in.v.begin() + n, in.v.begin() + b * n);
    ui.latents = &in;
    ui.timestep = sched.timesteps()[(size_t)i];
    ui.run_stage = r.run_stage;  // block by block
    Map out = unet_->predict(ui);
    if (out.n != batch || out.h != lh || out.w != lw || out.c != C)
      fail("the UNet answered [{}, {}, {}, {}] for [{}, {}, {}, {}]", out.n, out.h, out.w, out.c, batch, lh, lw, C);
    if (cfg) {
      const float* u = out.v.data();
      const float* t = u + n;
      for (int64_t k = 0; k < n; k++) guided.v[(size_t)k] = u[k] + g * (t[k] - u[k]);
    } else {
      std::copy(out.v.begin(), out.v.end(), guided.v.begin());
    }
    // The clean-latent estimate (the scheduler's pred_original_sample), for previews.
    const float sigma = sched.sigmas()[(size_t)i];
    for (int64_t k = 0; k < n; k++) {
      float xv = x.v[(size_t)k], e = guided.v[(size_t)k];
      denoised.v[(size_t)k] =
          v_pred ? e * (-sigma / std::sqrt(sigma * sigma + 1)) + xv / (sigma * sigma + 1) : xv - sigma * e;
    }
    if (ancestral) {
      noise.resize((size_t)n);
      for (float& v : noise) v = (float)rng.normal();
    }
    sched.step(i, guided.v.data(), x.v.data(), n, ancestral ? noise.data() : nullptr);
    if (on_step) {
      StepReport s;
      s.step = i, s.total = sched.steps();
      s.timestep = ui.timestep, s.sigma = sigma;
      s.seconds = seconds_since(t_step), s.elapsed = seconds_since(t_denoise);
      s.unet_input = &in, s.unet_output = &out, s.guided = &guided, s.denoised = &denoised, s.latents = &x;
      on_step(s);
    }
  }
  res.timings.denoise = seconds_since(t_denoise);

  auto t_decode = clock::now();
  res.image = vae_->decode(x, r.run_stage);  // divides by scaling_factor; block by block
  res.rgb = to_rgb8(res.image);
  res.timings.decode = seconds_since(t_decode);
  res.latents = std::move(x);
  return res;
}

Rgb8 Painter::preview(const Map& latents, int64_t scale) const {
  // ComfyUI's comfy/latent_formats.py (SD15 and SDXL latent_rgb_factors / latent_rgb_factors_bias),
  // least-squares fits of the decoded RGB on the UNet-space latent: rows are the latent channels.
  static const float sd15[4][3] = {
      {0.3512f, 0.2297f, 0.3227f}, {0.3250f, 0.4974f, 0.2350f}, {-0.2829f, 0.1762f, 0.2721f}, {-0.2120f, -0.2616f, -0.7177f}};
  static const float sd15_bias[3] = {0, 0, 0};
  static const float sdxl[4][3] = {
      {0.3651f, 0.4232f, 0.4341f}, {-0.2533f, -0.0042f, 0.1068f}, {0.1076f, 0.1111f, -0.0362f}, {-0.3165f, -0.2492f, -0.2188f}};
  static const float sdxl_bias[3] = {0.1084f, -0.0175f, -0.0011f};
  if (latents.c != 4) fail("preview: latents with {} channels (the factors are for 4)", latents.c);
  if (scale < 1 || scale > 64) fail("preview: scale {} is outside [1, 64]", scale);
  const auto& m = kind() == PipelineKind::SDXL ? sdxl : sd15;
  const float* bias = kind() == PipelineKind::SDXL ? sdxl_bias : sd15_bias;
  Rgb8 img;
  img.w = latents.w * scale, img.h = latents.h * scale;
  img.px.resize((size_t)(img.w * img.h * 3));
  for (int64_t y = 0; y < img.h; y++)
    for (int64_t xx = 0; xx < img.w; xx++) {
      const float* l = latents.at(0, y / scale, xx / scale);
      uint8_t* o = &img.px[(size_t)((y * img.w + xx) * 3)];
      for (int c = 0; c < 3; c++) {
        float v = bias[c];
        for (int k = 0; k < 4; k++) v += l[k] * m[k][c];
        o[c] = (uint8_t)std::lround(std::clamp((v + 1.0f) / 2.0f, 0.0f, 1.0f) * 255.0f);
      }
    }
  return img;
}

}  // namespace kvad::image
