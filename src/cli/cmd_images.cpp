// kvad images make: text to image with an SD 1.5 / SDXL diffusers folder (image/painter.h). A
// progress bar per denoising step with an ETA on stderr (one line per step when stderr is not a
// terminal), optional previews of each step, the PNG with the A1111 `parameters` text chunk, and a
// final line of per-stage timings and the peak memory.
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <random>

#include "cli/common.h"
#include "cli/generation_io.h"
#include "core/error.h"
#include "core/fs.h"
#include "image/painter.h"
#include "image/png.h"
#include "io/http.h"
#include "runtime/image_model.h"

namespace kvad::cli {

namespace {

struct ImagesArgs {
  std::vector<std::string> words;  // the prompt: one quoted argument, or several words joined by spaces
  std::string prompt, model, base, negative, size, sampler = "euler", out, preview, quant = "f32";
  bool negative_given = false;
  int64_t steps = 20;
  double guidance = 7.5;
  uint64_t seed = 0;
  bool seed_given = false;
  int threads = 0;
};

// "WxH" or "N" (square); the model's multiples are checked once it is loaded.
std::pair<int64_t, int64_t> parse_size(const std::string& s) {
  auto num = [&](const std::string& part) -> int64_t {
    if (part.empty() || part.size() > 5 || part.find_first_not_of("0123456789") != std::string::npos)
      fail("--size {}: expected WIDTHxHEIGHT (e.g. 512x768) or one number for a square", s);
    return std::stoll(part);
  };
  size_t x = s.find_first_of("xX");
  if (x == std::string::npos) return {num(s), num(s)};
  return {num(s.substr(0, x)), num(s.substr(x + 1))};
}

std::string duration(double s) {
  if (!(s >= 0) || s > 360000) return "--:--";
  int t = (int)(s + 0.5);
  if (t >= 3600) return fmt::format("{}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60);
  return fmt::format("{}:{:02}", t / 60, t % 60);
}

std::string seconds(double s) {
  if (s < 0.1) return fmt::format("{:.1f} ms", s * 1000);
  return s < 10 ? fmt::format("{:.2f} s", s) : fmt::format("{:.1f} s", s);
}

// One line, redrawn in place on a terminal: "step 3/20 [####......] 15%  1.21 s/step  ETA 0:21".
class StepBar {
 public:
  StepBar() : tty_(isatty(2)) {}
  void update(const image::StepReport& s) {
    const int64_t done = s.step + 1;
    double per = s.elapsed / (double)done, eta = per * (double)(s.total - done);
    std::string line = fmt::format("step {:>3}/{} {} {:>3}%  {}/step  ETA {}", done, s.total,
                                   text_bar((double)done / (double)s.total, 20), done * 100 / s.total, seconds(per),
                                   duration(eta));
    if (tty_) std::fprintf(stderr, "\r\x1b[2K%s", fit_terminal_row(line).c_str());
    else std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
    drawn_ = true;
  }
  void finish() {
    if (tty_ && drawn_) std::fprintf(stderr, "\n");
  }

 private:
  bool tty_, drawn_ = false;
};

// Ctrl-C: the painting stops after the step under way (a step of a real model takes seconds);
// a second Ctrl-C ends the process at once. Nothing is written either way.
void on_sigint(int) {
  if (g_interrupted.load()) {
    std::signal(SIGINT, SIG_DFL);
    std::raise(SIGINT);
    return;
  }
  g_interrupted = true;
}

double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return (double)u.ru_maxrss / 1024.0;  // Linux: KiB
}

void make(const ImagesArgs& a) {
  using clock = std::chrono::steady_clock;
  // Everything that can be checked without the model first: a typo costs no load.
  const WeightFormat quant = parse_weight_format(a.quant);
  image::PartFormats::for_quant(quant);  // refuses q4 and the rest before the load
  if (a.prompt.empty()) fail("the prompt is empty (kvad images make \"a red fox in fresh snow\" --model DIR)");
  std::pair<int64_t, int64_t> size{0, 0};
  if (!a.size.empty()) size = parse_size(a.size);
  image::Sampler sampler = image::parse_sampler(a.sampler);
  const ImageModelRef ref = resolve_image_model(a.model);  // a missing model is said before anything is loaded
  std::string out = a.out.empty() ? fmt::format("kvad-{}.png", a.seed) : a.out;
  if (size_t slash = out.rfind('/'); slash != std::string::npos && slash > 0 && !is_directory(out.substr(0, slash)))
    fail("--out {}: the folder {} does not exist", out, out.substr(0, slash));
  if (is_directory(out)) fail("--out {}: is a folder (give the PNG's file name)", out);
  apply_threads(a.threads);
  g_interrupted = false;
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);

  auto t_load = clock::now();
  std::unique_ptr<image::Painter> p = load_painter(a.model, a.base, quant);
  double load_s = std::chrono::duration<double>(clock::now() - t_load).count();

  image::PaintRequest r;
  r.prompt = a.prompt;
  if (a.negative_given) r.negative = a.negative;
  r.width = size.first, r.height = size.second;
  const int64_t m = p->size_multiple();
  if (!a.size.empty() && (r.width < m || r.height < m || r.width % m || r.height % m || r.width > 8192 || r.height > 8192))
    fail("--size {}x{}: this model's width and height must be multiples of {} (its VAE's x{} times its UNet's x{} "
         "downsampling), from {} to 8192; the nearest is {}x{}",
         r.width, r.height, m, p->vae_factor(), m / p->vae_factor(), m,
         std::clamp((r.width + m / 2) / m * m, m, 8192 / m * m), std::clamp((r.height + m / 2) / m * m, m, 8192 / m * m));
  r.steps = a.steps;
  r.guidance = a.guidance;
  r.sampler = sampler;
  r.seed = a.seed;
  r = p->checked(r);
  if (!a.preview.empty()) make_directories(a.preview);
  std::fprintf(stderr, "%s (%s; %s) loaded in %s: %lldx%lld, %lld steps, %s, guidance %g, seed %llu\n",
               ref.name.c_str(), image::pipeline_kind_name(p->kind()), p->formats().describe().c_str(), seconds(load_s).c_str(),
               (long long)r.width, (long long)r.height, (long long)r.steps, image::sampler_name(sampler), r.guidance,
               (unsigned long long)r.seed);

  if (g_interrupted.load()) throw Cancelled("stopped before the first step: no image written");
  StepBar bar;
  image::PaintResult res = p->paint(r, [&](const image::StepReport& s) {
    bar.update(s);
    if (g_interrupted.load()) {
      bar.finish();
      throw Cancelled(fmt::format("stopped after step {} of {}: no image written", s.step + 1, s.total));
    }
    if (!a.preview.empty())
      image::write_png(join_path(a.preview, fmt::format("step-{:02}.png", s.step + 1)), p->preview(*s.denoised));
  });
  bar.finish();

  image::GenerationParams gp;
  gp.prompt = r.prompt;
  gp.negative = a.negative;
  gp.steps = r.steps;
  gp.sampler = sampler == image::Sampler::Euler ? "Euler" : "Euler a";  // A1111's names
  gp.guidance = r.guidance;
  gp.seed = r.seed;
  gp.width = res.width, gp.height = res.height;
  gp.model = ref.name;
  image::write_png(out, res.rgb, {{"parameters", image::a1111_parameters(gp)}});
  const auto& t = res.timings;
  std::printf("%s\n", out.c_str());
  std::fprintf(stderr,
               "wrote %s (%lldx%lld): text encode %s, denoise %s (%s/step), decode %s; total %s after a %s load; "
               "peak memory %.0f MiB\n",
               out.c_str(), (long long)res.width, (long long)res.height, seconds(t.text_encode).c_str(),
               seconds(t.denoise).c_str(), seconds(t.denoise / (double)r.steps).c_str(), seconds(t.decode).c_str(),
               seconds(t.text_encode + t.denoise + t.decode).c_str(), seconds(load_s).c_str(), peak_rss_mib());
}

}  // namespace

void add_images(CLI::App& app) {
  auto* images = app.add_subcommand("images", "image generation (Stable Diffusion 1.5 / SDXL diffusers folders)");
  images->require_subcommand(1);
  auto* cmd = images->add_subcommand("make", "paint an image from a prompt into a PNG (the parameters in its text chunk)");
  auto a = std::make_shared<ImagesArgs>();
  cmd->add_option("prompt", a->words, "what to paint (quoted, or the words after make)")->required();
  cmd->add_option("-m,--model", a->model, "a diffusers pipeline folder (model_index.json, unet/, vae/, text_encoder/ ...), a "
                  "store or Hub name (ORG/NAME), or a single-file checkpoint (FILE.safetensors, ORG/NAME:FILE) with --base")
      ->required();
  cmd->add_option("--base", a->base, "for a single-file --model: the diffusers folder (or store / Hub name) of the model "
                  "it was fine-tuned from, whose configs and tokenizers it lacks (its weights are not read)");
  cmd->add_option("--negative", a->negative, "what to steer away from (default: none: SD 1.5 encodes \"\", SDXL uses zeros)");
  cmd->add_option("--steps", a->steps, "denoising steps (default 20)")->check(CLI::Range(1, 1000));
  cmd->add_option("--guidance", a->guidance, "classifier-free guidance scale (default 7.5; 1 or less: none)")
      ->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--size", a->size, "WIDTHxHEIGHT, or one number for a square (default: the model's, 512 for SD 1.5, "
                                      "1024 for SDXL)");
  cmd->add_option("--seed", a->seed, "the noise's seed: the same seed gives the same image (default: random, printed)");
  cmd->add_option("--sampler", a->sampler, "euler (default) or euler_a (Euler ancestral)")
      ->check(CLI::IsMember({"euler", "euler_a"}));
  cmd->add_option("-o,--out", a->out, "the PNG to write (default kvad-SEED.png)");
  cmd->add_option("--preview", a->preview, "write DIR/step-NN.png after each step: the step's clean-latent estimate "
                                           "mixed to RGB, x8 (blurry, slightly wrong colours)");
  cmd->add_option("-q,--quant", a->quant, "weights: f32 (default), bf16 (UNet and VAE "
                  "in bf16 with bf16 products, ~1.4x f32's speed) or q8 (UNet and text encoders in int8, VAE bf16, "
                  "~2x)")->check(CLI::IsMember({"f32", "bf16", "q8"}));
  cmd->add_option("-t,--threads", a->threads, "threads to compute with (default: all cores)")->check(CLI::Range(0, 1024));
  cmd->callback([a, cmd] {
    ImagesArgs args = *a;
    for (const std::string& w : args.words) args.prompt += (args.prompt.empty() ? "" : " ") + w;
    args.negative_given = cmd->count("--negative") > 0;
    if (cmd->count("--seed") == 0)
      args.seed = (std::random_device{}() ^ (uint64_t)std::chrono::steady_clock::now().time_since_epoch().count()) %
                  4294967296ull;  // 32 bits: what A1111-style tools show and take back
    make(args);
  });
}

}  // namespace kvad::cli
