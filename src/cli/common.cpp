#include "cli/common.h"

#include <sys/ioctl.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <initializer_list>
#include <cstdio>
#include <random>

#include "core/error.h"
#include "core/fs.h"
#include "core/threads.h"
#include "io/hf_cache.h"
#include "io/store.h"
#include "runtime/devices.h"

// The gzip'd tokenizer fixtures, linked in by CMake (embed/tokenizers.S).
#define KVAD_BLOB(sym) extern "C" const unsigned char sym[], sym##_end[];
KVAD_BLOB(kvad_tok_gpt2_json)
KVAD_BLOB(kvad_tok_gpt2_config)
KVAD_BLOB(kvad_tok_llama3_json)
KVAD_BLOB(kvad_tok_llama3_config)
KVAD_BLOB(kvad_tok_qwen3_json)
KVAD_BLOB(kvad_tok_qwen3_config)
KVAD_BLOB(kvad_tok_deepseek_v3_json)
KVAD_BLOB(kvad_tok_deepseek_v3_config)

namespace kvad::cli {

void add_model_args(CLI::App* cmd, ModelArgs& a, bool required) {
  auto* o = cmd->add_option("-m,--model", a.model,
                            "a model folder (config.json + safetensors + tokenizer.json), a .gguf file, a name in kvad's "
                            "store, or a Hub model ORG/NAME[@REVISION] in the Hugging Face cache");
  if (required) o->required();
  cmd->add_flag("--pull", a.pull, "download the Hub model (ORG/NAME) first if it is not in the Hugging Face cache");
  cmd->add_option("-t,--threads", a.threads, "threads to compute with (default: all cores)")->check(CLI::Range(0, 1024));
  cmd->add_option("-q,--quant", a.quant, "weights in memory: auto (as stored), f32, bf16, q8, q4, or q4k / q6k (llama.cpp's "
                  "K-quants; every width a multiple of 256). A .gguf file runs as stored")
      ->check(CLI::IsMember({"auto", "f32", "bf16", "q8", "q4", "q4k", "q6k"}));
  add_kv_type_option(cmd, a.kv_type);
  add_device_option(cmd, a.device);
  add_gpu_memory_option(cmd, a.gpu_memory);
  add_snapshot_options(cmd, a.snapshot_every, a.snapshots);
  add_lora_option(cmd, a.loras);
}

void add_snapshot_options(CLI::App* cmd, int64_t& every, int64_t& slots) {
  cmd->add_option("--snapshot-every", every, "models with a recurrent state (Qwen3-Next): keep a snapshot of it every N "
                  "positions, a multiple of the KV block size (16), so a rewind or a prompt that repeats an earlier start "
                  "resumes there instead of from the beginning; 0 = none (default " +
                  std::to_string(kDefaultSnapshotEvery) + "; docs/recurrent-state.md)")
      ->check(CLI::Range((int64_t)0, (int64_t)1 << 24));
  cmd->add_option("--snapshots", slots, "recurrent models: snapshots kept at most, thinned out with distance from each "
                  "sequence's end when short (default " + std::to_string(kDefaultSnapshotsPerSequence) +
                  " per --parallel sequence)")
      ->check(CLI::Range((int64_t)0, (int64_t)1 << 20));
}

void add_lora_option(CLI::App* cmd, std::vector<std::string>& loras) {
  cmd->add_option("--lora", loras, "a LoRA adapter beside the weights, PATH[:SCALE] (default scale 1; repeatable): a PEFT "
                  "folder (adapter_config.json + adapter_model.safetensors) or a llama.cpp LoRA .gguf. docs/lora.md")
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);  // one path per --lora: a prompt after it stays the prompt
}

void add_kv_type_option(CLI::App* cmd, std::string& kv_type) {
  cmd->add_option("--kv-type", kv_type, "what the KV cache stores per position: auto (default: bf16), f32, bf16 (half "
                  "the bytes) or q8 (int8 + a scale per head: about a quarter); docs/kv-cache.md has their quality "
                  "and speed")
      ->check(CLI::IsMember({"auto", "f32", "bf16", "q8"}));
}

kernels::KvType kv_type_for(const std::string& name) {
  if (name == "auto") return kernels::KvType::BF16;
  return kernels::parse_kv_type(name);
}

// A CLI11 check from a function that throws on a bad value: its message, or "" when it passes.
static std::function<std::string(const std::string&)> check_by(void (*throws)(const std::string&)) {
  return [throws](const std::string& v) {
    try {
      throws(v);
      return std::string();
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
  };
}

void add_device_option(CLI::App* cmd, std::string& device) {
  cmd->add_option("--device", device, "where the model runs: cpu (default), gpu (the first Vulkan GPU) or gpu:N (a "
                  "device as `kvad devices` numbers them; a CPU driver such as lavapipe only when named or with "
                  "KVAD_VULKAN_ALLOW_CPU=1). docs/gpu.md")
      ->check(check_by([](const std::string& d) { check_device_name(d); }));
}

void add_gpu_memory_option(CLI::App* cmd, std::string& size) {
  cmd->add_option("--gpu-memory", size, "with --device gpu: the device memory kvad may fill, e.g. 6GiB (default: all of "
                  "it). The weights must fit; the KV cache takes what they leave, and without -c/--ctx the context is "
                  "capped to fit (kvad says so)")
      ->check(check_by([](const std::string& s) { parse_byte_size(s, "--gpu-memory"); }));
}

std::string text_bar(double frac, int width) {
  const int fill = (int)(std::min(1.0, std::max(0.0, frac)) * width);
  return "[" + std::string((size_t)fill, '#') + std::string((size_t)(width - fill), '.') + "]";
}

int terminal_columns() {
  winsize ws{};
  if (ioctl(2, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 80;
}

namespace {
// The largest length <= n that does not end inside a UTF-8 character of `s`.
size_t utf8_cut(const std::string& s, size_t n) {
  if (n >= s.size()) return s.size();
  while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80) n--;
  return n;
}
}  // namespace

std::string elide_middle(const std::string& s, size_t n) {
  if (s.size() <= n) return s;
  if (n <= 3) return s.substr(0, utf8_cut(s, n));
  // A third for the start, the rest for the end: the end of a path names the model.
  const size_t head = utf8_cut(s, (n - 3) / 3);
  size_t tail_from = s.size() - (n - 3 - head);
  while (tail_from < s.size() && ((unsigned char)s[tail_from] & 0xC0) == 0x80) tail_from++;
  return s.substr(0, head) + "..." + s.substr(tail_from);
}

std::string fit_terminal_row(const std::string& line) {
  const size_t room = (size_t)std::max(1, terminal_columns() - 1);
  return line.substr(0, utf8_cut(line, room));
}

CLI::Option* add_ctx_option(CLI::App* cmd, int64_t& ctx, const std::string& what, const std::string& names) {
  return cmd->add_option(names, ctx, what)->check(CLI::Range((int64_t)0, (int64_t)1 << 24));
}

namespace {

// "kvad: loading MODEL (to q8)  [#####.......]  41%  152 of 339 tensors" on stderr while a long
// step works through a model's weights, redrawn at most 10 times a second, once the step has taken
// half a second (a cached or mapped load never shows it) and only on a terminal; erased when all
// are done or the line is destroyed.
class ProgressLine {
 public:
  ProgressLine(std::string what, std::string unit)
      : what_(std::move(what)), unit_(std::move(unit)), tty_(isatty(2)), start_(std::chrono::steady_clock::now()) {}
  ~ProgressLine() { erase(); }
  void update(int64_t done, int64_t total) {
    if (!tty_ || total <= 0) return;
    if (done >= total) return erase();
    const auto now = std::chrono::steady_clock::now();
    if (now - start_ < std::chrono::milliseconds(500) || now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    const std::string counts = fmt::format("  {} {:>3}%  {} of {} {}", text_bar((double)done / (double)total, 24),
                                           100 * done / total, done, total, unit_);
    // The model's path gives way first: the line must fit one row to be erased whole.
    const int room = terminal_columns() - 1 - 6 - (int)counts.size();
    const std::string what = elide_middle(what_, (size_t)std::max(12, room));
    std::fprintf(stderr, "\r\x1b[2K%s", fit_terminal_row("kvad: " + what + counts).c_str());
    drawn_ = true;
  }

 private:
  void erase() {
    if (drawn_) std::fprintf(stderr, "\r\x1b[2K");
    drawn_ = false;
  }
  std::string what_, unit_;
  bool tty_, drawn_ = false;
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace

EngineOptions device_engine_options(const ModelArgs& a, const LoadedModel& m) {
  EngineOptions o;
  o.kv_type = kv_type_for(a.kv_type);
  o.device = a.device;
  if (!a.gpu_memory.empty()) o.device_memory = parse_byte_size(a.gpu_memory, "--gpu-memory");
  set_gpu_weight_cache(o, m);
  return o;
}

EngineOptions engine_options(const ModelArgs& a, const LoadedModel& m) {
  EngineOptions o = device_engine_options(a, m);
  o.loras = lora_uses(m.loras);
  o.ctx = a.ctx;
  o.snapshot_every = a.snapshot_every;
  o.snapshots = a.snapshots;
  if (is_gpu_device(a.device)) {
    auto line = std::make_shared<ProgressLine>("copying the weights to the GPU", "matrices");
    o.on_weights_progress = [line](int64_t done, int64_t total) { line->update(done, total); };
  }
  return o;
}

void add_spec_args(CLI::App* cmd, SpeculativeConfig& a) {
  cmd->add_option("--draft,--model-draft", a.draft,
                  "speculative decoding with a draft model: a smaller model with the same tokenizer (or the model itself "
                  "with --draft-quant q4); output is unchanged, only faster when the draft agrees often");
  cmd->add_option("--draft-quant", a.draft_quant, "the draft's weights in memory, as -q (default: as stored)")
      ->check(CLI::IsMember({"auto", "f32", "bf16", "q8", "q4", "q4k", "q6k"}));
  cmd->add_option("--spec", a.spec, "speculative decoding without a second model: ngram = prompt lookup (drafts what "
                  "followed the latest earlier occurrence of the last few tokens; fast when the output copies the input)")
      ->check(CLI::IsMember({"ngram"}));
  cmd->add_option("--draft-max", a.draft_max, "tokens drafted per step at most; the count adapts below it (default 16)")
      ->check(CLI::Range(1, 64));
  cmd->add_option("--draft-min", a.draft_min, "shorter drafts are not verified (default 0)")->check(CLI::Range(0, 64));
  cmd->add_option("--draft-p-min", a.draft_p_min,
                  "a draft model stops drafting once its own probability of the next token is below this (default 0.75)")
      ->check(CLI::Range(0.0, 0.999));
  cmd->add_option("--spec-ngram-min", a.ngram_min, "--spec ngram: the shortest match to draft from (default 1)")
      ->check(CLI::Range(1, 64));
  cmd->add_option("--spec-ngram-max", a.ngram_max, "--spec ngram: the longest match tried first (default 4)")
      ->check(CLI::Range(1, 64));
}

SpeculativeOptions load_speculative(const SpeculativeConfig& a, const LoadedModel& target, int64_t ctx) {
  std::string note;
  SpeculativeOptions o = speculative_options(a, target, ctx, 1, &note);
  if (!note.empty()) std::fprintf(stderr, "kvad: draft: %s\n", note.c_str());
  return o;
}

void take_positional_model(ModelArgs& a, std::vector<std::string>& words) {
  if (!a.model.empty() || words.empty()) return;
  const std::string& w = words[0];
  bool path_shaped = w[0] == '/' || w.rfind("./", 0) == 0 || w.rfind("../", 0) == 0 || w[0] == '~' || is_gguf_path(w);
  bool names_model = w.find_first_of(" \t\n") == std::string::npos &&
                     (path_shaped || is_directory(w) || hf::looks_like_repo_ref(w) || find_in_store(w));
  if (!names_model) return;
  a.model = w;
  words.erase(words.begin());
}

std::string format_parameters(int64_t n) {
  if (n <= 0) return "-";
  if (n < 1'000'000'000) return fmt::format("{:.1f}M", n / 1e6);
  return fmt::format("{:.2f}B", n / 1e9);
}

void apply_threads(int threads) {
  if (threads > default_threads())
    std::fprintf(stderr, "kvad: warning: --threads %d is more than the %d cores this machine has: the extra threads only "
                 "wait for each other (slower, not faster)\n", threads, default_threads());
  set_threads(threads);
}

LoadedModel load_from_args(const ModelArgs& a) {
  apply_threads(a.threads);
  if (a.pull) pull_if_missing(a.model);
  LoadOptions opts;
  opts.format = parse_weight_format(a.quant);
  opts.copy_in_place_weights = !is_gpu_device(a.device);
  LoadedModel m;
  {
    ProgressLine progress("loading " + a.model +
                              (opts.format == WeightFormat::AsStored ? "" : std::string(" (to ") + weight_format_name(opts.format) + ")"),
                          "tensors");
    opts.on_progress = [&](int64_t done, int64_t total) { progress.update(done, total); };
    m = load_model(a.model, opts);
  }
  if (!m.load_report.note.empty()) std::fprintf(stderr, "kvad: %s\n", m.load_report.note.c_str());
  m.loras = load_loras(a.loras, *m.model);
  return m;
}

void add_sampling_args(CLI::App* cmd, SamplingArgs& a) {
  a.p.top_k = 40;
  a.p.top_p = 0.95f;
  a.p.min_p = 0.05f;
  cmd->add_option("-n,--max-tokens", a.max_tokens, "tokens to generate at most (default 256)")->check(CLI::Range(1, 1 << 24));
  cmd->add_option("--temperature,--temp", a.p.temperature, "0 = greedy (default 0.8)");
  cmd->add_option("--top-k", a.p.top_k, "keep the k most likely tokens, 0 = off (default 40)");
  cmd->add_option("--top-p", a.p.top_p, "nucleus sampling, 1 = off (default 0.95)");
  cmd->add_option("--min-p", a.p.min_p, "drop tokens below min_p x the top probability (default 0.05)");
  cmd->add_option("--repetition-penalty,--repeat-penalty", a.p.repetition_penalty, "1 = off (default)");
  cmd->add_option("--presence-penalty", a.p.presence_penalty, "OpenAI-style, -2..2 (default 0)");
  cmd->add_option("--frequency-penalty", a.p.frequency_penalty, "OpenAI-style, -2..2 (default 0)");
  cmd->add_option("--seed", a.p.seed, "random seed: the same seed gives the same text (default: random)")
      ->each([&a](const std::string&) { a.seed_given = true; });
  // One text per --stop, so words after it stay the prompt (kvad run M --stop X once upon a time).
  cmd->add_option("--stop", a.stop, "stop when this text appears (repeatable)")
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_flag("--ignore-eos", a.ignore_eos, "keep generating past the end-of-sequence token");
}

void finalize_sampling(SamplingArgs& a) {
  if (!a.seed_given) a.p.seed = std::random_device{}() ^ (uint64_t)std::chrono::steady_clock::now().time_since_epoch().count();
  validate(a.p);
}

static std::string gunzip(const unsigned char* b, const unsigned char* e) {
  z_stream zs{};
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) fail("zlib: inflateInit failed");
  zs.next_in = const_cast<unsigned char*>(b);
  zs.avail_in = (uInt)(e - b);
  std::string out;
  char buf[1 << 16];
  int rc;
  do {
    zs.next_out = reinterpret_cast<Bytef*>(buf);
    zs.avail_out = sizeof buf;
    rc = inflate(&zs, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) {
      inflateEnd(&zs);
      fail("zlib: embedded tokenizer is corrupt ({})", rc);
    }
    out.append(buf, sizeof buf - zs.avail_out);
  } while (rc != Z_STREAM_END);
  inflateEnd(&zs);
  return out;
}

// GPT-2's BPE cut to its first n-1 entries (and the merges that make them) + <|endoftext|> as id
// n-1: the real format at another vocabulary size (SmolLM2-135M's 49152 here).
static void write_trimmed_gpt2(int64_t n, const std::string& dir) {
  Json tj = Json::parse(gunzip(kvad_tok_gpt2_json, kvad_tok_gpt2_json_end));
  Json tc = Json::parse(gunzip(kvad_tok_gpt2_config, kvad_tok_gpt2_config_end));
  int64_t keep = n - 1;
  Json vocab = Json::object();
  for (auto it = tj["model"]["vocab"].begin(); it != tj["model"]["vocab"].end(); ++it)
    if (it->get<int64_t>() < keep) vocab[it.key()] = *it;
  vocab["<|endoftext|>"] = keep;
  Json merges = Json::array();
  for (int64_t i = 0; i < keep - 256; i++) merges.push_back(tj["model"]["merges"][(size_t)i]);
  tj["model"]["vocab"] = vocab;
  tj["model"]["merges"] = merges;
  tj["added_tokens"][0]["id"] = keep;
  tc["added_tokens_decoder"] = {{std::to_string(keep), tc["added_tokens_decoder"]["50256"]}};
  tc["model_max_length"] = 8192;
  atomic_write_file(join_path(dir, "tokenizer.json"), tj.dump());
  atomic_write_file(join_path(dir, "tokenizer_config.json"), tc.dump(2));
}

void write_fixture_tokenizer(const std::string& family, const std::string& dir) {
  if (family.rfind("gpt2-trim", 0) == 0) return write_trimmed_gpt2(std::stoll(family.substr(9)), dir);
  struct Embedded {
    const char* family;
    const unsigned char *json, *json_end, *config, *config_end;
  };
#define KVAD_FAMILY(f) {#f, kvad_tok_##f##_json, kvad_tok_##f##_json_end, kvad_tok_##f##_config, kvad_tok_##f##_config_end}
  static const Embedded kEmbedded[] = {KVAD_FAMILY(qwen3), KVAD_FAMILY(llama3), KVAD_FAMILY(gpt2),
                                       KVAD_FAMILY(deepseek_v3)};
#undef KVAD_FAMILY
  for (const Embedded& e : kEmbedded)
    if (family == e.family) {
      atomic_write_file(join_path(dir, "tokenizer.json"), gunzip(e.json, e.json_end));
      atomic_write_file(join_path(dir, "tokenizer_config.json"), gunzip(e.config, e.config_end));
      return;
    }
  fail("unknown tokenizer family '{}'", family);
}

size_t parse_byte_size(const std::string& text, const std::string& flag) {
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(text, &pos);
  } catch (const std::exception&) {
    fail("{} '{}': expected a size such as 2GiB or 512MiB", flag, text);
  }
  std::string unit = text.substr(pos);
  double mult = 0;
  for (auto [u, m] : std::initializer_list<std::pair<const char*, double>>{
           {"", 1}, {"B", 1}, {"K", 1024.0}, {"KiB", 1024.0}, {"KB", 1e3}, {"M", 1048576.0}, {"MiB", 1048576.0},
           {"MB", 1e6}, {"G", 1073741824.0}, {"GiB", 1073741824.0}, {"GB", 1e9}, {"T", 1099511627776.0}, {"TiB", 1099511627776.0}})
    if (unit == u) mult = m;
  if (mult == 0 || !(v > 0) || v * mult > 1e15)
    fail("{} '{}': expected a positive size such as 2GiB or 512MiB (units B, KiB, MiB, GiB, TiB, KB, MB, GB)", flag, text);
  return (size_t)(v * mult);
}

}  // namespace kvad::cli
