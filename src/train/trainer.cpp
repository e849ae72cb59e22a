#include "train/trainer.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>

#include "core/error.h"
#include "core/fs.h"
#include "core/threads.h"
#include "train/checkpoint.h"
#include "train/data.h"
#include "train/profile.h"
#include "train/progress.h"

namespace kvad::train {

uint64_t available_memory_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  std::string unit;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The run's configuration by flag name: stored in trainer_state.json and compared on --resume.
Json config_json(const TrainOptions& o) {
  const ModelShape& s = o.shape;
  return {{"arch", arch_name(s.arch)},    {"layers", s.layers},
          {"dim", s.dim},                 {"heads", s.heads},
          {"kv-heads", s.kv_heads},       {"ffn", s.ffn},
          {"context", s.context},         {"untied", !s.tied},
          {"all-bytes", o.all_bytes},     {"batch", o.batch},
          {"steps", o.steps},             {"lr", o.lr.lr},
          {"min-lr", o.lr.min_lr},        {"warmup", o.lr.warmup},
          {"schedule", o.lr.kind == LrSchedule::Constant ? "constant" : "cosine"},
          {"weight-decay", o.adam.weight_decay},
          {"grad-clip", o.adam.grad_clip}, {"seed", o.seed},
          {"eval-every", o.eval_every},   {"eval-windows", o.eval_windows},
          {"save-every", o.save_every}};
}

void apply_config_json(TrainOptions& o, const Json& j) {
  ModelShape& s = o.shape;
  s.arch = j.at("arch").get<std::string>() == "llama" ? Arch::Llama : Arch::Gpt2;
  s.layers = j.at("layers"), s.dim = j.at("dim"), s.heads = j.at("heads"), s.kv_heads = j.at("kv-heads");
  s.ffn = j.at("ffn"), s.context = j.at("context"), s.tied = !j.at("untied").get<bool>();
  o.all_bytes = j.at("all-bytes"), o.batch = j.at("batch"), o.steps = j.at("steps");
  o.lr.lr = j.at("lr"), o.lr.min_lr = j.at("min-lr"), o.lr.warmup = j.at("warmup");
  o.lr.kind = parse_schedule(j.at("schedule").get<std::string>());
  o.adam.weight_decay = j.at("weight-decay"), o.adam.grad_clip = j.at("grad-clip"), o.seed = j.at("seed");
  o.eval_every = j.at("eval-every"), o.eval_windows = j.at("eval-windows"), o.save_every = j.at("save-every");
}

Json shape_json(const ModelShape& s) {
  return {{"arch", arch_name(s.arch)}, {"vocab", s.vocab},       {"layers", s.layers},     {"dim", s.dim},
          {"heads", s.heads},          {"kv_heads", s.kv_heads}, {"ffn", s.ffn},           {"context", s.context},
          {"tied", s.tied},            {"norm_eps", s.norm_eps}, {"rope_theta", s.rope_theta},
          {"head_size", s.head_size},  {"positions", s.positions}, {"qkv_bias", s.qkv_bias}, {"qk_norm", s.qk_norm}};
}

std::string hex64(uint64_t v) { return fmt::format("{:016x}", v); }

// Mean cross-entropy over the first `max_windows` (0 = all) validation windows, in batches.
std::pair<double, int64_t> evaluate(Model<float>& m, const Corpus& c, int64_t B, int64_t max_windows) {
  const int64_t T = m.shape().context;
  int64_t n = val_windows(c, T);
  if (max_windows > 0) n = std::min(n, max_windows);
  std::vector<int32_t> x((size_t)(B * T)), y((size_t)(B * T));
  double total = 0;
  for (int64_t w = 0; w < n; w += B) {
    int64_t nb = std::min(B, n - w);
    for (int64_t b = 0; b < nb; b++) val_window(c, w + b, T, &x[(size_t)(b * T)], &y[(size_t)(b * T)]);
    total += m.forward(x.data(), y.data(), nb, T) * (double)(nb * T);
  }
  return {total / (double)(n * T), n * T};
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

TrainResult run_training(TrainOptions o, const TrainHooks& hooks) {
  set_threads(o.threads);
  const std::string& dir = o.dir;

  // ---- configuration: fresh, or the checkpoint's with the few flags a resumed run may change.
  LoadedCheckpoint ck;
  int64_t start = 0;
  Json losses = Json::array(), val_history = Json::array();
  double trained_seconds = 0;
  if (o.resume) {
    if (!is_directory(dir)) fail("--resume: there is no model {} to resume", dir);
    ck = load_checkpoint(dir);
    Json stored = ck.state.at("config"), now = config_json(o);
    static const std::set<std::string> may_change = {"steps", "eval-every", "eval-windows", "save-every"};
    for (const std::string& key : o.given)
      if (stored.contains(key) && !may_change.count(key) && now[key] != stored[key])
        fail("--{} {} differs from the checkpoint's {}: a resumed run keeps its configuration", key, now[key].dump(),
             stored[key].dump());
    for (const std::string& key : may_change)
      if (o.given.count(key)) stored[key] = now[key];
    apply_config_json(o, stored);
    if (o.data.empty()) o.data = ck.state.at("corpus").at("path").get<std::string>();
    start = ck.state.at("step");
    losses = ck.state.at("losses");
    val_history = ck.state.at("val");
    trained_seconds = ck.state.value("train_seconds", 0.0);
    if (start >= o.steps) fail("{} is already trained to step {}; give a larger --steps to continue", dir, start);
  } else if (is_directory(dir) || file_exists(dir)) {
    if (!o.force)
      fail("a model named {} already exists ({}); use --resume to continue training it or --force to replace it",
           std::filesystem::path(dir).filename().string(), dir);
  }
  if (o.lr.min_lr < 0) o.lr.min_lr = o.lr.lr / 10;
  o.lr.total = o.steps;
  if (o.batch < 1 || o.steps < 1) fail("--batch and --steps must be positive");

  // ---- data and model shape
  Corpus corpus = load_corpus(o.data, o.all_bytes);
  if (o.resume) {
    const Json& cj = ck.state.at("corpus");
    if (cj.at("bytes").get<int64_t>() != corpus.size() || cj.at("fnv1a").get<std::string>() != hex64(corpus.hash))
      fail("--data {} is not the text {} was trained on ({} bytes, fnv1a {}; this file has {} bytes, fnv1a {}): "
           "a resumed run must see the same corpus",
           o.data, dir, cj.at("bytes").get<int64_t>(), cj.at("fnv1a").get<std::string>(), corpus.size(),
           hex64(corpus.hash));
  }
  o.shape.vocab = (int64_t)corpus.vocab.size();
  o.shape.finalize();
  check_corpus_fits(corpus, o.shape.context);

  // ---- refuse up front what cannot fit or cannot be written
  uint64_t need = Model<float>::training_bytes(o.shape, o.batch), have = available_memory_bytes();
  if (have && need > have / 10 * 9)
    fail("this configuration needs about {:.1f} GB (parameters, gradients, AdamW state and activations for batch {} x "
         "context {}) but only {:.1f} GB is available; use a smaller --dim, --layers, --batch or --context",
         (double)need / 1e9, o.batch, o.shape.context, (double)have / 1e9);
  std::string parent = std::filesystem::path(dir).parent_path().string();
  try {
    make_directories(parent);
  } catch (const Error& e) {
    fail("cannot write the model to {}: {}", dir, e.what());
  }
  if (access(parent.c_str(), W_OK) != 0) fail("cannot write the model to {}: {} is not writable", dir, parent);
  remove_stale_temporaries(dir);
  if (!o.json_out.empty()) {
    std::filesystem::path jp = std::filesystem::path(o.json_out).parent_path();
    if (jp.empty()) jp = std::filesystem::current_path();
    if (!is_directory(jp.string()) || access(jp.c_str(), W_OK) != 0)
      fail("--json-out {}: cannot write in {}", o.json_out, jp.string());
  }

  Model<float> model(o.shape, o.batch);
  AdamW opt(model.layout(), o.adam);
  if (o.resume) {
    std::copy(ck.params.begin(), ck.params.end(), model.params());
    opt.m() = std::move(ck.adam_m);
    opt.v() = std::move(ck.adam_v);
  } else {
    model.init(o.seed);
  }
  ck = LoadedCheckpoint{};

  const int64_t B = o.batch, T = o.shape.context;
  Progress progress(hooks.progress, o.steps, o.log_every);
  progress.message(hooks.out,
                   fmt::format("{} {}: {} layers, dim {}, {} heads{}, context {}, vocab {} -> {:.2f}M parameters; "
                               "{} train / {} validation chars; batch {}, steps {}{}, {} threads",
                               o.resume ? "resuming" : "training", arch_name(o.shape.arch), o.shape.layers, o.shape.dim,
                               o.shape.heads,
                               o.shape.kv_heads != o.shape.heads ? fmt::format(" ({} kv)", o.shape.kv_heads) : "",
                               T, o.shape.vocab, (double)model.num_params() / 1e6, corpus.n_train, corpus.n_val(), B,
                               o.steps, o.resume ? fmt::format(" from {}", start) : "", pool().size()));

  auto save = [&](int64_t step, const Json& val) {
    Json state = {{"format", "kvad-train/1"},
                  {"step", step},
                  {"shape", shape_json(o.shape)},
                  {"config", config_json(o)},
                  {"vocab", corpus.vocab},
                  {"corpus", {{"path", o.data}, {"bytes", corpus.size()}, {"fnv1a", hex64(corpus.hash)}}},
                  {"losses", losses},
                  {"val", val_history},
                  {"train_seconds", trained_seconds}};
    Json extra = {{"trained_by", "kvad train"},
                  {"corpus", std::filesystem::path(o.data).filename().string()},
                  {"step", step}};
    if (!val.is_null()) extra["val_bpc"] = val;
    CheckpointData d;
    d.shape = &o.shape, d.layout = &model.layout(), d.params = model.params();
    d.vocab = corpus.vocab, d.config_extra = extra;
    d.adam_m = opt.m().data(), d.adam_v = opt.v().data(), d.state = state;
    save_checkpoint(dir, d);
    progress.message(hooks.out, fmt::format("saved {} at step {}", dir, step));
    if (hooks.on_checkpoint) hooks.on_checkpoint(dir, step);
  };

  // ---- the loop
  std::vector<int32_t> x((size_t)(B * T)), y((size_t)(B * T));
  std::vector<double> step_seconds;
  std::vector<double> recent;  // for the progress line's chars/s and ETA
  double last_loss = 0;
  int64_t step = start;
  bool interrupted = false;
  Json last_val = nullptr;
  while (step < o.steps) {
    step++;
    auto t0 = Clock::now();
    sample_batch(corpus, o.seed, step, B, T, x.data(), y.data());
    double loss = model.forward(x.data(), y.data(), B, T);
    model.backward();
    {
      PhaseTimer pt("adamw");
      opt.update(model.params(), model.grads(), step, o.lr.at(step));
    }
    double dt = seconds_since(t0);
    if (!std::isfinite(loss)) fail("the loss became {} at step {}: lower --lr", loss, step);
    trained_seconds += dt;
    step_seconds.push_back(dt);
    losses.push_back(loss);
    last_loss = loss;
    recent.push_back(dt);
    if (recent.size() > 20) recent.erase(recent.begin());
    double avg = 0;
    for (double r : recent) avg += r;
    avg /= (double)recent.size();
    progress.step(step, loss, (double)(B * T) / avg, avg * (double)(o.steps - step));

    bool stop = hooks.stop && hooks.stop->load();
    if (o.eval_every > 0 && step % o.eval_every == 0 && step < o.steps && !stop) {
      auto [vl, n] = evaluate(model, corpus, B, o.eval_windows);
      val_history.push_back({step, vl});
      progress.message(hooks.out, fmt::format("step {}: val loss {:.4f}, {:.4f} bits/char ({} chars)", step, vl,
                                              vl / std::log(2.0), n));
    }
    if (stop) {
      interrupted = true;
      break;
    }
    if (o.save_every > 0 && step % o.save_every == 0 && step < o.steps) save(step, nullptr);
  }

  TrainResult res;
  res.step = step;
  res.interrupted = interrupted;
  if (interrupted) {
    save(step, nullptr);
    progress.message(hooks.out, fmt::format("interrupted: saved step {} in {}; continue with --resume", step, dir));
    progress.finish();
    return res;
  }

  // ---- final validation, the last checkpoint, the summary
  auto te = Clock::now();
  auto [vl, n_val] = evaluate(model, corpus, B, o.final_eval_windows);
  double eval_s = seconds_since(te);
  val_history.push_back({step, vl});
  double bpc = vl / std::log(2.0);
  progress.message(hooks.out, fmt::format("step {}: val loss {:.4f}, {:.4f} bits/char ({} chars)", step, vl, bpc, n_val));
  save(step, std::round(bpc * 1e4) / 1e4);

  std::vector<double> timed(step_seconds.begin() + std::min<size_t>(step_seconds.size() - 1, (size_t)o.timing_warmup),
                            step_seconds.end());
  double med = median(timed), sum = 0;
  for (double t : timed) sum += t;
  double last10 = 0;
  size_t nl = std::min<size_t>(10, losses.size());
  for (size_t i = losses.size() - nl; i < losses.size(); i++) last10 += losses[i].get<double>();
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  res.summary = {{"params", model.num_params()},
                 {"chars_per_s_median", std::round((double)(B * T) / med * 10) / 10},
                 {"chars_per_s_mean", std::round((double)(B * T) * (double)timed.size() / sum * 10) / 10},
                 {"step_ms_median", std::round(med * 1e5) / 100},
                 {"timed_steps", timed.size()},
                 {"final_train_loss", last_loss},
                 {"train_loss_last10_mean", std::round(last10 / (double)nl * 1e4) / 1e4},
                 {"val_loss", std::round(vl * 1e4) / 1e4},
                 {"val_bpc", std::round(bpc * 1e4) / 1e4},
                 {"val_chars_scored", n_val},
                 {"eval_s", std::round(eval_s * 10) / 10},
                 {"maxrss_mb", std::round((double)ru.ru_maxrss / 1024 * 10) / 10},
                 {"threads", pool().size()},
                 {"isa", isa_name(best_isa())},
                 {"arch", arch_name(o.shape.arch)},
                 {"steps", step},
                 {"model", dir}};
  progress.finish();
  profile_report(hooks.progress);
  std::string line = res.summary.dump();
  if (hooks.out) {
    std::fprintf(hooks.out, "%s\n", line.c_str());
    std::fflush(hooks.out);
  }
  if (!o.json_out.empty()) atomic_write_file(o.json_out, line + "\n");
  return res;
}

}  // namespace kvad::train
