#include "train/trainer.h"

#include "train/gemm.h"

#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>

#include "core/checksum.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/meminfo.h"
#include "core/threads.h"
#include "train/base.h"
#include "train/checkpoint.h"
#include "train/data.h"
#include "train/distributed.h"
#include "tokenizer/tokenizer.h"
#include "train/token_data.h"
#include "train/profile.h"
#include "train/progress.h"

namespace kvad::train {

// A fine-tune's context when --context is not given: the base's, up to this (a base's own is
// often 32k+, whose attention probabilities alone would not fit a batch).
constexpr int64_t kDefaultLoraContext = 512;

uint64_t available_memory_bytes() { return meminfo_bytes("MemAvailable"); }

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
          {"save-every", o.save_every},   {"precision", o.precision}};
}

// A fine-tune's configuration adds the base and the adapter's shape; its model shape is the base's.
Json lora_config_json(const TrainOptions& o) {
  Json j = config_json(o);
  for (const char* key : {"arch", "layers", "dim", "heads", "kv-heads", "ffn", "untied", "all-bytes"}) j.erase(key);
  const LoraTrainOptions& l = o.lora_opts;
  j.update({{"lora", true}, {"base", l.base}, {"base-name", l.base_name}, {"base-quant", l.base_quant},
            {"rank", l.adapter.rank}, {"alpha", l.adapter.alpha}, {"rslora", l.adapter.rslora},
            {"targets", l.adapter.targets}});
  return j;
}

void apply_config_json(TrainOptions& o, const Json& j) {
  ModelShape& s = o.shape;
  s.context = j.at("context");
  if (j.value("lora", false)) {
    LoraTrainOptions& l = o.lora_opts;
    l.base = j.at("base"), l.base_name = j.at("base-name"), l.base_quant = j.at("base-quant");
    l.adapter.rank = j.at("rank"), l.adapter.alpha = j.at("alpha"), l.adapter.rslora = j.at("rslora");
    l.adapter.targets = j.at("targets").get<std::vector<std::string>>();
  } else {
    s.arch = j.at("arch").get<std::string>() == "llama" ? Arch::Llama : Arch::Gpt2;
    s.layers = j.at("layers"), s.dim = j.at("dim"), s.heads = j.at("heads"), s.kv_heads = j.at("kv-heads");
    s.ffn = j.at("ffn"), s.tied = !j.at("untied").get<bool>();
    o.all_bytes = j.at("all-bytes");
  }
  o.batch = j.at("batch"), o.steps = j.at("steps");
  o.lr.lr = j.at("lr"), o.lr.min_lr = j.at("min-lr"), o.lr.warmup = j.at("warmup");
  o.lr.kind = parse_schedule(j.at("schedule").get<std::string>());
  o.adam.weight_decay = j.at("weight-decay"), o.adam.grad_clip = j.at("grad-clip"), o.seed = j.at("seed");
  o.eval_every = j.at("eval-every"), o.eval_windows = j.at("eval-windows"), o.save_every = j.at("save-every");
  o.precision = j.value("precision", "f32");  // runs saved before the option trained in f32
}

Json shape_json(const ModelShape& s) {
  return {{"arch", arch_name(s.arch)}, {"vocab", s.vocab},       {"layers", s.layers},     {"dim", s.dim},
          {"heads", s.heads},          {"kv_heads", s.kv_heads}, {"ffn", s.ffn},           {"context", s.context},
          {"tied", s.tied},            {"norm_eps", s.norm_eps}, {"rope_theta", s.rope_theta},
          {"head_size", s.head_size},  {"positions", s.positions}, {"qkv_bias", s.qkv_bias}, {"qk_norm", s.qk_norm}};
}

// What the loop asks of its data, for characters (data.h) and for a base's tokens (token_data.h).
struct LoopData {
  std::function<int64_t(int64_t step, int32_t* x, int32_t* y)> batch;  // returns T
  int64_t val_batches = 0;
  std::function<int64_t(int64_t i, int32_t* x, int32_t* y, int64_t* rows)> val;  // returns T
  std::function<int64_t(const int32_t* y, int64_t n)> target_bytes;  // text behind the scored targets
};

LoopData char_data(const Corpus& c, uint64_t seed, int64_t B, int64_t T) {
  LoopData d;
  d.batch = [&c, seed, B, T](int64_t step, int32_t* x, int32_t* y) {
    sample_batch(c, seed, step, B, T, x, y);
    return T;
  };
  const int64_t windows = val_windows(c, T);
  d.val_batches = (windows + B - 1) / B;
  d.val = [&c, B, T, windows](int64_t i, int32_t* x, int32_t* y, int64_t* rows) {
    *rows = std::min(B, windows - i * B);
    for (int64_t b = 0; b < *rows; b++) val_window(c, i * B + b, T, x + b * T, y + b * T);
    return T;
  };
  d.target_bytes = [](const int32_t*, int64_t n) { return n; };  // a token is a character
  return d;
}

LoopData token_data(const TokenData& t, const Tokenizer& tok, uint64_t seed, int64_t B, int64_t context) {
  LoopData d;
  d.batch = [&t, seed, B, context](int64_t step, int32_t* x, int32_t* y) {
    return token_batch(t, seed, step, B, context, x, y);
  };
  d.val_batches = token_val_batches(t, B, context);
  d.val = [&t, B, context](int64_t i, int32_t* x, int32_t* y, int64_t* rows) {
    return token_val_batch(t, i, B, context, x, y, rows);
  };
  d.target_bytes = [&tok](const int32_t* y, int64_t n) { return target_bytes(tok, y, n); };
  return d;
}

struct Eval {
  double loss = 0;      // mean cross-entropy per scored token (nats)
  double bpc = 0;       // bits per character (byte) of the text behind them
  int64_t scored = 0, bytes = 0;
};

// Validation over the first `max_rows` (0 = all) sequences, in the data's batches of B. Under
// data-parallel training each rank scores its contiguous share of every batch's rows and the ranks'
// sums are added (so every rank returns the whole figure).
Eval evaluate(Model<float>& m, const LoopData& d, int64_t B, int64_t max_rows) {
  const World& w = world();
  const int64_t ctx = m.shape().context;
  std::vector<int32_t> x((size_t)(B * ctx)), y((size_t)(B * ctx));
  double sums[3] = {0, 0, 0};  // nats, scored targets, bytes behind them
  for (int64_t i = 0, done = 0; i < d.val_batches && (max_rows <= 0 || done < max_rows); i++) {
    int64_t rows = 0, T = d.val(i, x.data(), y.data(), &rows);
    if (max_rows > 0) rows = std::min(rows, max_rows - done);
    done += rows;
    const int64_t r0 = rows * w.rank() / w.size(), n = rows * (w.rank() + 1) / w.size() - r0;
    const int32_t* xs = x.data() + r0 * T;
    const int32_t* ys = y.data() + r0 * T;
    int64_t scored = 0;
    for (int64_t k = 0; k < n * T; k++) scored += ys[k] >= 0;
    if (scored == 0) continue;
    sums[0] += m.forward(xs, ys, n, T) * (double)scored;
    sums[1] += (double)scored;
    sums[2] += (double)d.target_bytes(ys, n * T);
  }
  w.sum(sums, 3);
  Eval e;
  e.scored = (int64_t)sums[1], e.bytes = (int64_t)sums[2];
  if (e.scored == 0) return e;
  e.loss = sums[0] / (double)e.scored;
  e.bpc = sums[0] / std::log(2.0) / (double)std::max<int64_t>(1, e.bytes);
  return e;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Under mpirun each rank takes its part of this machine's cores by default: the cores / the ranks
// here, and no more than the cores mpirun bound it to (one each by default for up to 2 ranks, a
// socket's for more; all with --bind-to none).
int rank_threads(int local_ranks) {
  int n = std::max(1, default_threads() / local_ranks);
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) n = std::min(n, std::max(1, CPU_COUNT(&set)));
  return n;
}

}  // namespace

TrainResult run_training(TrainOptions o, const TrainHooks& hooks) {
  // Under mpirun (distributed.h) every rank runs this same function on the same global batches;
  // rank 0 alone prints and writes.
  const World& w = world();
  FILE* const out = w.root() ? hooks.out : nullptr;
  FILE* const progress_out = w.root() ? hooks.progress : nullptr;
  if (o.threads == 0 && w.distributed()) o.threads = rank_threads(w.local_size());
  set_threads(o.threads);
  const std::string& dir = o.dir;
  // The linear layers' precision for this run, and back to f32 when it returns (the server trains
  // jobs in its own process).
  struct PrecisionScope {
    ~PrecisionScope() { set_linear_bf16(false); }
  } precision_scope;

  // ---- configuration: fresh, or the checkpoint's with the few flags a resumed run may change.
  LoadedCheckpoint ck;
  Json resumed_state;  // a fine-tune's trainer_state.json (its adapter is read once the layout is known)
  int64_t start = 0;
  Json losses = Json::array(), val_history = Json::array();
  double trained_seconds = 0;
  if (o.resume) {
    if (!is_directory(dir)) fail("--resume: there is no model {} to resume", dir);
    if (o.lora) {
      std::string state_path = join_path(dir, "trainer_state.json");
      if (!file_exists(state_path)) fail("{}: no trainer_state.json, so there is nothing to resume", dir);
      resumed_state = read_json_file(state_path);
      if (!resumed_state.at("config").value("lora", false))
        fail("--resume --lora: {} is a model trained by kvad train, not an adapter", dir);
    } else {
      ck = load_checkpoint(dir);
      resumed_state = ck.state;
    }
    Json stored = resumed_state.at("config"), now = o.lora ? lora_config_json(o) : config_json(o);
    // precision: a speed choice whose loss curve stays the f32 one's (docs/training.md), so a run
    // may continue in the other.
    static const std::set<std::string> may_change = {"steps", "eval-every", "eval-windows", "save-every", "precision"};
    for (const std::string& key : o.given)
      if (stored.contains(key) && !may_change.count(key) && now[key] != stored[key])
        fail("--{} {} differs from the checkpoint's {}: a resumed run keeps its configuration", key, now[key].dump(),
             stored[key].dump());
    for (const std::string& key : may_change)
      if (o.given.count(key)) stored[key] = now[key];
    apply_config_json(o, stored);
    if (o.data.empty()) o.data = resumed_state.at("corpus").at("path").get<std::string>();
    start = resumed_state.at("step");
    losses = resumed_state.at("losses");
    val_history = resumed_state.at("val");
    trained_seconds = resumed_state.value("train_seconds", 0.0);
    if (start >= o.steps) fail("{} is already trained to step {}; give a larger --steps to continue", dir, start);
  } else if (w.root() && (is_directory(dir) || file_exists(dir))) {
    if (!o.force)
      fail("a model named {} already exists ({}); use --resume to continue training it or --force to replace it",
           std::filesystem::path(dir).filename().string(), dir);
  }
  if (o.lr.min_lr < 0) o.lr.min_lr = o.lr.lr / 10;
  o.lr.total = o.steps;
  if (o.batch < 1 || o.steps < 1) fail("--batch and --steps must be positive");
  // Each rank takes an equal contiguous share of the batch's sequences: rows [first_row, + share).
  if (o.batch % w.size())
    fail("--batch {} cannot be shared by the {} ranks of mpirun -np {}: each rank takes an equal share of the "
         "batch's sequences, so --batch must be a multiple of {}",
         o.batch, w.size(), w.size(), w.size());
  const int64_t share = o.batch / w.size(), first_row = share * w.rank();

  // ---- model shape and data: characters of the corpus, or a base and its tokenizer's tokens
  BaseModel base;
  std::unique_ptr<Tokenizer> tokenizer;
  Corpus corpus;
  TokenData tokens;
  if (o.lora) {
    const LoraTrainOptions& l = o.lora_opts;
    base = load_base_model(l.base, o.given.count("context") || o.resume ? o.shape.context : 0, kDefaultLoraContext,
                           l.base_quant);
    o.shape = base.shape;
    tokenizer = std::make_unique<Tokenizer>(
        Tokenizer::load(join_path(l.base, "tokenizer.json"), join_path(l.base, "tokenizer_config.json")));
    tokens = load_token_data(o.data, *tokenizer, o.shape.context);
  } else {
    corpus = load_corpus(o.data, o.all_bytes);
    o.shape.vocab = (int64_t)corpus.vocab.size();
    o.shape.finalize();
    check_corpus_fits(corpus, o.shape.context);
  }
  const int64_t data_bytes = o.lora ? tokens.bytes : corpus.size();
  const uint64_t data_hash = o.lora ? tokens.hash : corpus.hash;
  if (o.resume) {
    const Json& cj = resumed_state.at("corpus");
    if (cj.at("bytes").get<int64_t>() != data_bytes || cj.at("fnv1a").get<std::string>() != hex64(data_hash))
      fail("--data {} is not the text {} was trained on ({} bytes, fnv1a {}; this file has {} bytes, fnv1a {}): "
           "a resumed run must see the same corpus",
           o.data, dir, cj.at("bytes").get<int64_t>(), cj.at("fnv1a").get<std::string>(), data_bytes,
           hex64(data_hash));
  }
  std::optional<LoraLayout> lora;
  if (o.lora) lora = make_lora_layout(o.shape, o.lora_opts.adapter);
  const LoraLayout* lora_ptr = lora ? &*lora : nullptr;

  // ---- refuse up front what cannot fit or cannot be written (the ranks on this machine share its memory)
  uint64_t need = Model<float>::training_bytes(o.shape, share, lora_ptr) * (uint64_t)w.local_size(),
           have = available_memory_bytes();
  if (have && need > have / 10 * 9)
    fail("this configuration needs about {:.1f} GB (parameters, gradients, AdamW state and activations for batch {} x "
         "context {}{}) but only {:.1f} GB is available; use a smaller --dim, --layers, --batch or --context",
         (double)need / 1e9, o.batch, o.shape.context,
         w.local_size() > 1 ? fmt::format(", {} ranks on this machine", w.local_size()) : "", (double)have / 1e9);
  if (w.root()) {  // the only rank that writes
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
  }

  Model<float> model(o.shape, share, lora_ptr);
  AdamW opt(model.trainable_layout(), o.adam);
  if (o.lora) {
    std::copy(base.params.begin(), base.params.end(), model.params());
    base.params = {};
    if (o.resume) {
      LoadedAdapter ad = load_peft_adapter(dir, *lora);
      if (ad.adam_m.empty()) fail("{}: no optimizer.safetensors, so there is nothing to resume", dir);
      std::copy(ad.adapter.begin(), ad.adapter.end(), model.trainable());
      opt.m() = std::move(ad.adam_m);
      opt.v() = std::move(ad.adam_v);
    } else {
      lora_init(model.trainable(), *lora, o.seed);
    }
  } else if (o.resume) {
    std::copy(ck.params.begin(), ck.params.end(), model.params());
    opt.m() = std::move(ck.adam_m);
    opt.v() = std::move(ck.adam_v);
  } else {
    model.init(o.seed);
  }
  ck = LoadedCheckpoint{};
  // Each host reads its own --data, base and checkpoint: the ranks must start from the same ones.
  if (w.distributed()) {
    if (!w.agree(data_hash))
      fail("--data {}: the ranks read different texts; every host needs the same file at that path", o.data);
    if (!w.agree(xxh64(model.params(), sizeof(float) * (size_t)model.num_params())) ||
        !w.agree(xxh64(model.trainable(), sizeof(float) * (size_t)model.num_trainable())))
      fail("the ranks start from different weights: every host needs the same {}",
           o.lora ? (o.resume ? "base model and adapter at the same paths" : "base model at the same path")
                  : (o.resume ? "checkpoint at the same path" : "kvad build"));
  }
  const LoopData data = o.lora ? token_data(tokens, *tokenizer, o.seed, o.batch, o.shape.context)
                               : char_data(corpus, o.seed, o.batch, o.shape.context);

  const int64_t B = o.batch, T = o.shape.context;
  Progress progress(progress_out, o.steps, o.log_every);
  std::string what = o.lora ? fmt::format("a LoRA adapter (rank {}, alpha {}{}, on {}: {:.2f}M parameters) for {} "
                                          "({}, {:.2f}M parameters{}, frozen); {}",
                                          lora->config.rank, lora->config.alpha, lora->config.rslora ? ", rsLoRA" : "",
                                          fmt::join(lora->config.targets, ","), (double)lora->total() / 1e6,
                                          o.lora_opts.base_name, base.architecture, (double)model.num_params() / 1e6,
                                          o.lora_opts.base_quant.empty() ? "" : ", rounded to q8",
                                          describe(tokens, T))
                            : fmt::format("{}: {} layers, dim {}, {} heads{}, context {}, vocab {} -> {:.2f}M "
                                          "parameters; {} train / {} validation chars",
                                          arch_name(o.shape.arch), o.shape.layers, o.shape.dim, o.shape.heads,
                                          o.shape.kv_heads != o.shape.heads ? fmt::format(" ({} kv)", o.shape.kv_heads)
                                                                            : "",
                                          T, o.shape.vocab, (double)model.num_params() / 1e6, corpus.n_train,
                                          corpus.n_val());
  // Which products the run uses; on f32 where the CPU has bf16's, the flag that switches (a choice:
  // its loss curve differs a little, docs/training.md).
  const std::string products = o.precision == "bf16"   ? "; bf16 products"
                               : bf16_gemm_supported() ? "; f32 products (this CPU has AVX512-BF16: --precision "
                                                         "bf16 may train faster, docs/training.md)"
                                                       : "";
  progress.message(out, fmt::format("{} {}; batch {}, steps {}{}, {}{} threads{}", o.resume ? "resuming" : "training",
                                    what, B, o.steps, o.resume ? fmt::format(" from {}", start) : "",
                                    w.distributed() ? fmt::format("{} ranks x ", w.size()) : "", pool().size(),
                                    products));

  // A fine-tune starts by scoring the base as it is (the adapter adds nothing yet): the figure its
  // validation loss is to beat.
  Json base_val = o.resume ? resumed_state.value("base_val", Json(nullptr)) : Json(nullptr);
  if (o.lora && !o.resume) {
    Eval e = evaluate(model, data, B, o.eval_windows);
    base_val = {{"loss", e.loss}, {"bpc", e.bpc}, {"tokens", e.scored}};
    progress.message(out, fmt::format("step 0 (the base): val loss {:.4f}, {:.4f} bits/char ({} tokens)", e.loss,
                                            e.bpc, e.scored));
  }

  // Every rank must hold the same weights (the same summed gradients, the same AdamW update):
  // checked at each checkpoint, so a divergence cannot go on unnoticed.
  auto check_ranks_agree = [&](int64_t step) {
    if (!w.distributed()) return;
    if (!w.agree(xxh64(model.trainable(), sizeof(float) * (size_t)model.num_trainable())))
      fail("the {} ranks' weights differ at step {}, where the same summed gradients should have kept them equal: "
           "a bug in data-parallel training",
           w.size(), step);
  };
  auto save = [&](int64_t step, const Json& val) {
    check_ranks_agree(step);
    if (!w.root()) return;
    Json state = {{"format", "kvad-train/1"},
                  {"step", step},
                  {"shape", shape_json(o.shape)},
                  {"config", o.lora ? lora_config_json(o) : config_json(o)},
                  {"corpus", {{"path", o.data}, {"bytes", data_bytes}, {"fnv1a", hex64(data_hash)}}},
                  {"losses", losses},
                  {"val", val_history},
                  {"train_seconds", trained_seconds}};
    Json extra = {{"trained_by", "kvad train"},
                  {"corpus", std::filesystem::path(o.data).filename().string()},
                  {"step", step}};
    if (!val.is_null()) extra["val_bpc"] = val;
    if (o.lora) {
      state["base_val"] = base_val;
      if (!base_val.is_null()) extra["base_val_bpc"] = std::round(base_val["bpc"].get<double>() * 1e4) / 1e4;
      // How it was trained goes beside the adapter, not into adapter_config.json: PEFT warns about
      // (older versions refuse) keys it does not know there.
      state["trained"] = extra;
      AdapterSaveInfo info;
      info.base_model = o.lora_opts.base_name;
      info.adam_m = opt.m().data(), info.adam_v = opt.v().data(), info.state = state;
      save_peft_adapter(dir, *lora, model.trainable(), info);
    } else {
      state["vocab"] = corpus.vocab;
      CheckpointData d;
      d.shape = &o.shape, d.layout = &model.layout(), d.params = model.params();
      d.vocab = corpus.vocab, d.config_extra = extra;
      d.adam_m = opt.m().data(), d.adam_v = opt.v().data(), d.state = state;
      save_checkpoint(dir, d);
    }
    progress.message(out, fmt::format("saved {} at step {}{}", dir, step,
                                      w.distributed() ? fmt::format(" (the same weights on all {} ranks)", w.size())
                                                      : ""));
    if (hooks.on_checkpoint) hooks.on_checkpoint(dir, step);
  };

  // ---- the loop
  std::vector<int32_t> x((size_t)(B * T)), y((size_t)(B * T));
  std::vector<double> step_seconds, allreduce_seconds;
  std::vector<double> recent;  // for the progress line's tokens/s and ETA
  double last_loss = 0;
  if (o.precision != "f32" && o.precision != "bf16") fail("--precision {}: expected f32 or bf16", o.precision);
  set_linear_bf16(o.precision == "bf16");
  int64_t step = start;
  bool interrupted = false;
  while (step < o.steps) {
    step++;
    auto t0 = Clock::now();
    // Every rank draws the whole batch and runs its share of the rows, each scored target's loss
    // divided by the whole batch's count of them: the ranks' gradients sum to the batch's.
    const int64_t Tn = data.batch(step, x.data(), y.data());
    int64_t scored = 0;
    for (int64_t k = 0; k < B * Tn; k++) scored += y[(size_t)k] >= 0;
    double loss = model.forward(x.data() + first_row * Tn, y.data() + first_row * Tn, share, Tn, scored);
    model.backward();
    bool stop = hooks.stop && hooks.stop->load();
    if (w.distributed()) {
      auto ta = Clock::now();
      PhaseTimer pt("allreduce");
      w.sum(model.trainable_grads(), model.num_trainable());
      // The batch's loss, and whether any rank was asked to stop (all stop at the same step).
      double v[2] = {loss, stop ? 1.0 : 0.0};
      w.sum(v, 2);
      loss = v[0], stop = v[1] > 0;
      allreduce_seconds.push_back(seconds_since(ta));
    }
    {
      PhaseTimer pt("adamw");
      opt.update(model.trainable(), model.trainable_grads(), step, o.lr.at(step));
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
    progress.step(step, loss, (double)(B * Tn) / avg, avg * (double)(o.steps - step));

    if (o.eval_every > 0 && step % o.eval_every == 0 && step < o.steps && !stop) {
      Eval e = evaluate(model, data, B, o.eval_windows);
      val_history.push_back({step, e.loss});
      progress.message(out, fmt::format("step {}: val loss {:.4f}, {:.4f} bits/char ({} {})", step, e.loss, e.bpc,
                                              e.scored, o.lora ? "tokens" : "chars"));
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
    progress.message(out, fmt::format("interrupted: saved step {} in {}; continue with --resume", step, dir));
    progress.finish();
    return res;
  }

  // ---- final validation, the last checkpoint, the summary
  auto te = Clock::now();
  Eval fin = evaluate(model, data, B, o.final_eval_windows);
  double eval_s = seconds_since(te);
  const double vl = fin.loss, bpc = fin.bpc;
  val_history.push_back({step, vl});
  progress.message(out, fmt::format("step {}: val loss {:.4f}, {:.4f} bits/char ({} {}{})", step, vl, bpc,
                                          fin.scored, o.lora ? "tokens" : "chars",
                                          base_val.is_null() ? ""
                                                             : fmt::format("; the base: {:.4f}",
                                                                           base_val["bpc"].get<double>())));
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
                 {"val_chars_scored", fin.bytes},
                 {"eval_s", std::round(eval_s * 10) / 10},
                 {"maxrss_mb", std::round((double)ru.ru_maxrss / 1024 * 10) / 10},
                 {"threads", pool().size()},
                 {"isa", isa_name(best_isa())},
                 {"arch", arch_name(o.shape.arch)},
                 {"steps", step},
                 {"model", dir}};
  if (o.lora) {
    res.summary["params"] = lora->total();
    res.summary["base_params"] = model.num_params();
    res.summary["val_tokens_scored"] = fin.scored;
    if (!base_val.is_null()) res.summary["base_val_bpc"] = std::round(base_val["bpc"].get<double>() * 1e4) / 1e4;
  }
  if (w.distributed()) {
    res.summary["ranks"] = w.size();
    res.summary["allreduce_ms_median"] = std::round(median(allreduce_seconds) * 1e5) / 100;
  }
  progress.finish();
  profile_report(progress_out);
  std::string line = res.summary.dump();
  if (out) {
    std::fprintf(out, "%s\n", line.c_str());
    std::fflush(out);
  }
  if (!o.json_out.empty() && w.root()) atomic_write_file(o.json_out, line + "\n");
  return res;
}

}  // namespace kvad::train
