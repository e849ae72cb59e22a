// kvad bench: prefill and decode speed, time to first token, model bytes and peak RSS, in the
// manner of llama-bench; --json prints one line per prompt length shaped like the peer harness's
// bench output so the two compare directly.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "cli/common.h"
#include "core/cpu.h"
#include "core/error.h"
#include "core/threads.h"
#include "core/fs.h"
#include "core/rng.h"
#include "runtime/bench.h"
#include "runtime/devices.h"
#include "runtime/image_bench.h"
#include "serve/serving_bench.h"

#include <unistd.h>

namespace kvad::cli {

static std::vector<int64_t> parse_list(const std::string& s, const char* flag) {
  std::vector<int64_t> v;
  std::stringstream in(s);
  for (std::string part; std::getline(in, part, ',');) {
    try {
      size_t used = 0;
      long long x = std::stoll(part, &used);
      if (used != part.size() || x < 0) throw std::invalid_argument("");
      v.push_back(x);
    } catch (const std::exception&) {
      fail("{}: '{}' is not a non-negative integer", flag, part);
    }
  }
  if (v.empty()) fail("{}: give at least one value", flag);
  return v;
}

// "pp128 tg128", as llama-bench names a test.
static std::string test_name(int64_t p, int64_t g) {
  return g > 0 ? fmt::format("pp{} tg{}", p, g) : fmt::format("pp{}", p);
}

// "1234.5 ±3%": the median and half the min-max spread.
static std::string with_spread(const Stats& s, int decimals) {
  double pct = s.median > 0 ? 50 * (s.max - s.min) / s.median : 0;
  return fmt::format("{:.{}f} ±{:.0f}%", s.median, decimals, pct);
}

// A row measured while other processes used the CPU gets a mark, and the table a footnote
// (printed by busy_footnote) with the most cores they took.
static double g_busiest = 0;
static std::string busy_note(double cores) {
  if (cores <= 0.2) return "";
  g_busiest = std::max(g_busiest, cores);
  return " !";
}
static void busy_footnote() {
  if (g_busiest > 0)
    std::printf("! measured while other processes used up to %.1f cores: not a figure to keep\n", g_busiest);
}

// A probe whose passes differed by more than a fifth met another tenant of the memory: the
// decode's share (of the best pass) is then only as good as the moment it was measured in. A line
// of its own (or nothing), under 100 columns.
static std::string unsteady_line(const ReadBandwidth& r) {
  if (r.best <= 0 || r.steady()) return "";
  return fmt::format("(probe passes {:.1f}-{:.1f} GB/s: something else uses the memory; \"of bw\" moves with it)\n",
                     r.lowest, r.best);
}

// Prompt lengths that fit the context with the decode steps after them: a longer one is measured
// at the longest that fits, and said so (the default 128,512 is longer than a small model's context).
static std::vector<int64_t> fit_lengths(const std::vector<int64_t>& asked, int64_t gen, int64_t ctx) {
  if (gen >= ctx) fail("--gen-tokens {} does not leave room for a prompt in the model's context of {}", gen, ctx);
  std::vector<int64_t> out;
  for (int64_t p : asked) {
    if (p < 1) fail("--prompt-tokens: lengths must be at least 1");
    int64_t fit = std::min(p, ctx - gen);
    if (fit != p)
      std::fprintf(stderr, "kvad bench: pp%lld + tg%lld does not fit the context of %lld: measuring pp%lld instead\n",
                   (long long)p, (long long)gen, (long long)ctx, (long long)fit);
    if (std::find(out.begin(), out.end(), fit) == out.end()) out.push_back(fit);
  }
  return out;
}

static Json stats_json(const Stats& s) { return {{"min", s.min}, {"median", s.median}, {"max", s.max}}; }

// kvad bench serve: the serving benchmark against a running OpenAI-compatible server
// (serve/serving_bench.h), one run per concurrency level of the sweep.
static void add_bench_serve(CLI::App* bench) {
  auto* cmd = bench->add_subcommand("serve", "benchmark a running OpenAI-compatible server (kvad serve, llama-server, vLLM) "
                                             "with concurrent streams: throughput against TTFT / TPOT / ITL / E2E latency");
  struct Args {
    serve::ServingBenchParams p;
    std::string url = "http://127.0.0.1:8080", concurrency = "1,2,4,8,16", json_out;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--url", a->url, "the server (default http://127.0.0.1:8080)");
  cmd->add_option("--api-key", a->p.api_key, "sent as 'Authorization: Bearer KEY' (default $KVAD_API_KEY)")->envname("KVAD_API_KEY");
  cmd->add_option("--model", a->p.model, "the request's model field (default: the server's)");
  cmd->add_option("--endpoint", a->p.endpoint, "/v1/completions (default: prompts as token ids, exact lengths) or /v1/chat/completions");
  cmd->add_option("--concurrency", a->concurrency, "streams in flight, a sweep: 1,2,4,8,16 (default)");
  cmd->add_option("--request-rate", a->p.request_rate, "requests per second, Poisson arrivals (default inf: all at once)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--num-prompts", a->p.num_prompts, "requests per concurrency level (default 32)")->check(CLI::Range(1, 100000));
  cmd->add_option("--input-len", a->p.input_len, "prompt tokens (default 128)")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--output-len", a->p.output_len, "tokens to generate (default 128)")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--range-ratio", a->p.range_ratio, "lengths uniform in [L(1-r), L(1+r)] (default 0)")->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--shared-prefix", a->p.shared_prefix, "tokens every prompt starts with (default 0)")->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--token-range", a->p.token_hi, "prompt token ids drawn from [100, N) (default 20000; keep under the vocabulary)")
      ->check(CLI::Range(101, 1 << 30));
  cmd->add_option("--conversations", a->p.conversations, "multi-turn chats instead of --num-prompts: each sends --turns "
                  "requests carrying its whole history, and the prefix-cache hit rate is reported")
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--turns", a->p.turns, "requests per conversation (default 4)")->check(CLI::Range(1, 1000));
  cmd->add_option("--seed", a->p.seed, "prompts' seed (default 0)");
  cmd->add_flag("!--no-ignore-eos", a->p.ignore_eos, "stop at the model's end-of-sequence token (default: exactly --output-len)");
  cmd->add_flag("--json", a->json, "one JSON object per concurrency level (vLLM's keys)");
  cmd->add_option("--json-out", a->json_out, "also write all results to this file (atomically)");
  cmd->callback([a] {
    if (a->p.conversations > 0) a->p.endpoint = "/v1/chat/completions";  // a conversation is a chat
    std::string rest = a->url;
    if (rest.rfind("http://", 0) == 0) rest = rest.substr(7);
    else if (rest.find("://") != std::string::npos) fail("--url {}: only http:// is supported", a->url);
    while (!rest.empty() && rest.back() == '/') rest.pop_back();
    size_t colon = rest.rfind(':');
    a->p.host = colon == std::string::npos ? rest : rest.substr(0, colon);
    a->p.port = 80;
    if (colon != std::string::npos) {
      try {
        a->p.port = std::stoi(rest.substr(colon + 1));
      } catch (const std::exception&) {
        fail("--url {}: the port is not a number", a->url);
      }
    }
    std::vector<serve::ServingBenchResult> results;
    Json all = Json::array();
    for (int64_t c : parse_list(a->concurrency, "--concurrency")) {
      if (c < 1) fail("--concurrency: levels must be >= 1");
      serve::ServingBenchParams p = a->p;
      p.concurrency = (int)c;
      bool tty = isatty(2);
      serve::ServingBenchResult r = serve::run_serving_bench(p, [&](int done, int total) {
        if (tty) std::fprintf(stderr, "\rconcurrency %lld: %d/%d requests", (long long)c, done, total);
      });
      if (tty) std::fprintf(stderr, "\n");
      if (r.completed == 0) fail("{}: no request succeeded: {}", a->url, r.first_error);
      Json j = r.to_json();
      j["url"] = a->url;
      j["machine"] = cpu_summary();
      all.push_back(j);
      if (a->json) std::printf("%s\n", j.dump().c_str());
      else std::printf("%s", serve::format_serving_result(r).c_str());
      std::fflush(stdout);
      results.push_back(r);
    }
    if (!a->json && results.size() > 1) std::printf("\n%s", serve::format_serving_table(results).c_str());
    if (!a->json_out.empty()) atomic_write_file(a->json_out, all.dump(1) + "\n");
  });
}

// kvad bench --spec ngram / --draft MODEL: plain and speculative greedy decoding side by side.
static void bench_speculation(const ModelArgs& args, const std::string& prompt_file, const std::string& prompt_tokens,
                              int64_t gen, int reps, bool json) {
  ModelArgs target_args = args;
  if (target_args.model.empty()) target_args.model = default_model();
  LoadedModel m = load_from_args(target_args);
  std::vector<int32_t> prompt;
  if (!prompt_file.empty()) {
    prompt = m.tokenizer->encode(read_file(prompt_file), true, true);
  } else {
    Rng rng(7654321);
    prompt.resize((size_t)parse_list(prompt_tokens, "--prompt-tokens").front());
    for (auto& t : prompt) t = (int32_t)rng.below((uint64_t)m.tokenizer->vocab_size());
  }
  SpeculativeOptions spec = load_speculative(args.spec, m, m.model->context_length());
  SpeculativeRun r = bench_speculative(*m.model, *m.tokenizer, prompt, gen, reps, spec);
  const double rate = r.drafted ? (double)r.kept / (double)r.drafted : 0;
  if (json) {
    Json j = {{"model", m.name}, {"quant", m.model->weight_format()}, {"drafts", spec.source->describe()},
              {"prompt_tokens", prompt.size()}, {"gen_tokens", gen}, {"reps", reps},
              {"plain_decode_tok_s", stats_json(r.plain_tok_s)}, {"spec_decode_tok_s", stats_json(r.spec_tok_s)},
              {"speedup", stats_json(r.ratio)}, {"drafted", r.drafted}, {"kept", r.kept}, {"acceptance", rate},
              {"same_output", r.same_output}, {"threads", pool().size()}, {"machine", cpu_summary()}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%s (%s), drafts from %s; prompt %zu tokens, %lld generated, %d reps, %d threads, %s\n", m.name.c_str(),
                m.model->weight_format().c_str(), spec.source->describe().c_str(), prompt.size(), (long long)gen, reps,
                pool().size(), cpu_summary().c_str());
    std::printf("plain decode %s tok/s | speculative %s tok/s | speed-up %s x%s\n",
                with_spread(r.plain_tok_s, 1).c_str(), with_spread(r.spec_tok_s, 1).c_str(),
                with_spread(r.ratio, 2).c_str(), busy_note(r.other_cores).c_str());
    std::printf("drafts kept %lld of %lld (%.0f%%); output %s\n", (long long)r.kept, (long long)r.drafted, 100 * rate,
                r.same_output ? "identical to plain decoding"
                              : "different from plain decoding (f32/bf16 sum a verifying forward's rows in another "
                                "order than a decode step: a near-tie can flip; docs/speculative.md)");
    busy_footnote();
  }
}

// kvad bench images: a denoising step and a VAE decode at real size, formats interleaved
// (runtime/image_bench.h).
static void add_bench_images(CLI::App* bench) {
  auto* cmd = bench->add_subcommand("images", "time an image model's UNet step (batch 2, guidance) and VAE decode at real "
                                              "size, weight formats side by side");
  struct Args {
    ImageBenchOptions o;
    std::string quant = "f32,bf16,q8", json_out;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--unet", a->o.unet_dir, "a unet/ folder (config.json + weights; scripts/unet_random_weights.py writes "
                  "SD 1.5 / SDXL shapes)");
  cmd->add_option("--vae", a->o.vae_dir, "a vae/ folder (scripts/unet_random_weights.py --part vae)");
  cmd->add_option("-q,--quant", a->quant, "formats to compare, interleaved: f32,bf16,q8 (default; the VAE runs as "
                  "the painter runs it: bf16 for q8)");
  cmd->add_option("--size", a->o.image_size, "image side in pixels (default: the UNet's sample_size x 8, else 512)")
      ->check(CLI::Range(8, 4096));
  cmd->add_option("--batch", a->o.batch, "UNet rows per call (default 2: guidance)")->check(CLI::Range(1, 16));
  cmd->add_option("-r,--reps", a->o.reps, "measured calls per format (default 3)")->check(CLI::Range(1, 1000));
  cmd->add_option("--warmup", a->o.warmup, "unmeasured calls per format first (default 1)")->check(CLI::Range(0, 100));
  cmd->add_option("--json-out", a->json_out, "also write the results to this file (atomically)");
  cmd->callback([a] {
    a->o.formats.clear();
    std::stringstream in(a->quant);
    for (std::string f; std::getline(in, f, ',');) {
      WeightFormat w = parse_weight_format(f);
      if (w != WeightFormat::F32 && w != WeightFormat::BF16 && w != WeightFormat::Q8)
        fail("--quant {}: image models run in f32, bf16 or q8", f);
      a->o.formats.push_back(w);
    }
    std::printf("%s%s%s; batch %lld, %d reps after %d warm-up, %d threads, %s\n", a->o.unet_dir.c_str(),
                a->o.unet_dir.empty() || a->o.vae_dir.empty() ? "" : " + ", a->o.vae_dir.c_str(), (long long)a->o.batch,
                a->o.reps, a->o.warmup, pool().size(), cpu_summary().c_str());
    std::fflush(stdout);
    std::vector<ImageBenchRun> runs = bench_image_parts(a->o);
    const size_t peak = peak_rss_bytes();
    std::printf("%-5s %-5s %8s %18s %8s\n", "part", "quant", "load s", "s per call", "speed-up");
    Json all = Json::array();
    for (const ImageBenchRun& r : runs) {
      // Against the first format of the same part, rep by rep (paired), as the interleaving allows.
      const ImageBenchRun* base = nullptr;
      for (const ImageBenchRun& b : runs)
        if (b.part == r.part) { base = &b; break; }
      std::vector<double> ratio;
      for (size_t i = 0; i < r.reps.size(); i++) ratio.push_back(base->reps[i] / r.reps[i]);
      Stats sp = stats_of(ratio);
      std::printf("%-5s %-5s %8.1f %18s %7.2fx%s\n", r.part.c_str(), weight_format_name(r.format), r.load_s,
                  with_spread(r.seconds, 2).c_str(), sp.median, busy_note(r.other_cores).c_str());
      all.push_back({{"part", r.part}, {"quant", weight_format_name(r.format)}, {"load_s", r.load_s},
                     {"seconds", stats_json(r.seconds)}, {"reps", r.reps}, {"speedup_vs_first", sp.median},
                     {"other_cores", r.other_cores}});
    }
    std::printf("peak RSS %.0f MB (every format above loaded at once: run one --quant alone for one format's memory)\n",
                (double)peak / 1e6);
    busy_footnote();
    if (!a->json_out.empty())
      atomic_write_file(a->json_out, Json{{"runs", all}, {"threads", pool().size()}, {"cpu", cpu_summary()},
                                          {"peak_rss_bytes", peak}, {"unet", a->o.unet_dir}, {"vae", a->o.vae_dir}}
                                         .dump(2) + "\n");
  });
}

void add_bench(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "measure prefill and decode speed of a model");
  struct Args {
    ModelArgs model;
    std::string prompt_tokens = "128,512", batch;
    int64_t gen_tokens = 128;
    int reps = 5, warmup = 1;
    bool json = false, no_bandwidth = false, profile = false;
    std::string prompt_file;  // speculative: the prompt (e.g. a passage to repeat)
  };
  auto a = std::make_shared<Args>();
  add_model_args(cmd, a->model, /*required=*/false);  // `kvad bench serve` needs none
  add_bench_serve(cmd);
  add_bench_images(cmd);
  cmd->add_option("-p,--prompt-tokens", a->prompt_tokens, "prompt lengths to measure, e.g. 128,512 (default)");
  cmd->add_option("-g,--gen-tokens", a->gen_tokens, "decode steps after the prompt (default 128; 0 = prefill only)");
  cmd->add_option("-r,--reps", a->reps, "measured repetitions (default 5)")->check(CLI::Range(1, 1000));
  cmd->add_option("--warmup", a->warmup, "unmeasured repetitions first (default 1)")->check(CLI::Range(0, 100));
  cmd->add_flag("--json", a->json, "one JSON object per prompt length");
  cmd->add_flag("--no-bandwidth", a->no_bandwidth, "skip the memory-bandwidth probe");
  cmd->add_flag("--profile", a->profile, "also print, at the end (stderr), where the time went: per backend operation "
                "and per matrix-product shape with the rate its weights were read at (= KVAD_PROFILE=1)");
  cmd->add_option("--batch", a->batch, "the engine batched instead, e.g. 1,4,8,16: that many sequences prefilled in one "
                  "step, then decoded together (aggregate tok/s; llama-batched-bench's measurement, no HTTP)");
  add_spec_args(cmd, a->model.spec);
  cmd->add_option("--prompt-file", a->prompt_file, "with --spec / --draft: the prompt, a text file (default: -p random "
                  "tokens, which no draft can guess)");
  cmd->callback([a, cmd] {
    if (cmd->got_subcommand("serve") || cmd->got_subcommand("images")) return;
    if (a->model.spec.any()) return bench_speculation(a->model, a->prompt_file, a->prompt_tokens, a->gen_tokens, a->reps, a->json);
    if (a->model.model.empty()) a->model.model = default_model();  // as run does; `kvad bench serve` measures a server
    std::vector<int64_t> ps = parse_list(a->prompt_tokens, "--prompt-tokens");
    if (a->gen_tokens < 0) fail("--gen-tokens must be >= 0");
    if (a->profile) setenv("KVAD_PROFILE", "1", 1);  // read where the backend is made (runtime/devices)
    LoadedModel m = load_from_args(a->model);
    const Model& model = *m.model;
    ps = fit_lengths(ps, a->gen_tokens, model.context_length());
    // A decode's share is of the bandwidth of the memory its weights are in: the host's, or on a
    // GPU the device's, measured by a shader reading a buffer (docs/gpu.md).
    const bool gpu = is_gpu_device(a->model.device);
    ReadBandwidth host;  // the CPU's probe, with its slowest pass
    if (!a->no_bandwidth && !gpu) host = measure_read_bandwidth();
    double bw = a->no_bandwidth ? 0 : gpu ? measure_gpu_read_bandwidth_gbs(a->model.device) : host.best;
    reset_peak_rss();  // the probe's buffer is gone: the peak is the model's and the benchmark's
    double bits = (double)model.weight_bytes() * 8 / (double)model.parameter_count();
    const EngineOptions base = device_engine_options(a->model, m);
    const kernels::KvType kv_type = base.kv_type;
    MemorySpec kv = model.memory_spec();
    kv.kv_type = kv_type;
    if (!a->json) {
      std::printf("%s\n%s, %s, %s params, %.1f MB weights (%.2f bits/param)\n", m.name.c_str(),
                  model.config().architecture.c_str(), model.weight_format().c_str(),
                  format_parameters(model.parameter_count()).c_str(), (double)model.weight_bytes() / 1e6, bits);
      // What a decode step moves: the weights it reads (a MoE model's active experts only) and
      // the cache it adds to (MLA: the latent alone).
      std::printf("per token: reads %.1f MB of weights, stores %.1f KB of KV cache (%s)\n",
                  (double)model.decode_read_bytes() / 1e6, (double)kv.bytes_per_token() / 1e3,
                  kernels::kv_type_name(kv_type));
      // A recurrent layer's state does not grow with the sequence: a fixed size per sequence.
      if (kv.state_bytes())
        std::printf("per sequence: a recurrent state of %.1f KB (f32), the same size at every length\n",
                    (double)kv.state_bytes() / 1e3);
      if (gpu)
        std::printf("device %s (Vulkan)%s; host: %d threads, %s\n\n", a->model.device.c_str(),
                    bw > 0 ? fmt::format(", read bandwidth {:.1f} GB/s", bw).c_str() : "", pool().size(),
                    cpu_summary().c_str());
      else
        std::printf("%d threads, %s%s\n%s\n", pool().size(), cpu_summary().c_str(),
                    bw > 0 ? fmt::format("; read bandwidth {:.1f} GB/s", bw).c_str() : "", unsteady_line(host).c_str());
    }
    // A decode step reads the weights and every cached position of its sequence (step i of g
    // attends over prompt + i + 1 of them: on average prompt + (g + 1) / 2), and a recurrent
    // layer's state: at 4k tokens of context the cache is a third of what a 0.5B q4 step reads.
    const auto kv_read_per_sequence = [&](int64_t prompt) {
      return (double)kv.bytes_per_token() * ((double)prompt + (double)(a->gen_tokens + 1) / 2) + (double)kv.state_bytes();
    };
    if (!a->batch.empty()) {
      if (a->gen_tokens < 2) fail("--batch needs --gen-tokens of at least 2");
      if (!a->json)
        std::printf("%-6s %-14s %14s %14s %11s %9s %7s\n", "batch", "test", "prefill tok/s", "decode tok/s", "per stream",
                    "step ms", "of bw");
      for (int64_t p : ps)
        for (int64_t b : parse_list(a->batch, "--batch")) {
          if (b < 1 || b > 1024) fail("--batch {}: between 1 and 1024 sequences", b);
          BatchedRun r = bench_batched(model, *m.tokenizer, p, a->gen_tokens, b, base, lora_uses(m.loras));
          // A step reads the weights once for the whole batch, and each sequence's cache: a batch
          // that reads memory at a smaller share than one sequence does is waiting on something
          // else (the arithmetic, or a kernel whose prefetch fell behind: docs/kernels.md, "Dense
          // tiles for a few tokens"). A MoE batch reads more experts than one token: a floor.
          const double step_bytes = (double)model.decode_read_bytes() + (double)b * kv_read_per_sequence(p);
          const double share = bw > 0 && r.step_ms > 0 ? 100 * step_bytes / (r.step_ms / 1e3) / 1e9 / bw : 0;
          if (a->json) {
            Json j = {{"model", m.name},          {"quant", model.weight_format()}, {"threads", pool().size()},
                      {"batch", b},               {"prompt_tokens", p},             {"gen_tokens", a->gen_tokens},
                      {"kv_type", kernels::kv_type_name(kv_type)}, {"prefill_tok_s", r.prefill_tok_s}, {"decode_tok_s", r.decode_tok_s},
                      {"decode_step_ms", r.step_ms}, {"decode_step_read_bytes", (int64_t)step_bytes},
                      {"decode_kv_read_bytes", (int64_t)kv_read_per_sequence(p)},  // per sequence
                      {"read_bandwidth_gbs", bw}, {"other_procs_cpu_cores", r.other_cores}};
            if (share > 0) j["decode_bandwidth_pct"] = share;
            std::printf("%s\n", j.dump().c_str());
          } else {
            const std::string of_bw = share > 0 ? fmt::format("{:.0f}%", share) : "-";
            std::printf("%-6lld %-14s %14.1f %14.2f %11.2f %9.1f %7s%s\n", (long long)b, test_name(p, a->gen_tokens).c_str(),
                        r.prefill_tok_s, r.decode_tok_s, r.decode_tok_s / (double)b, r.step_ms, of_bw.c_str(),
                        busy_note(r.other_cores).c_str());
          }
          std::fflush(stdout);
        }
      if (!a->json) busy_footnote();
      return;
    }
    if (!a->json)
      std::printf("%-14s %16s %9s %16s %9s %9s\n", "test", "prefill tok/s", "ttft ms", "decode tok/s", "of bw", "peak RSS");
    auto print_run = [&](const BenchRun& r, bool adapted, size_t peak_rss) {
      const double kv_read = kv_read_per_sequence(r.prompt_tokens);
      const double step_bytes = (double)model.decode_read_bytes() + kv_read;
      double read_gbs = r.decode_tok_s ? r.decode_tok_s->median * step_bytes / 1e9 : 0;
      if (a->json) {
        Json j = {{"model", m.name},
                  {"lora", adapted},
                  {"quant", model.weight_format()},
                  {"threads", pool().size()},
                  {"prompt_tokens", r.prompt_tokens},
                  {"gen_tokens", a->gen_tokens},
                  {"reps", a->reps},
                  {"prefill_tok_s", stats_json(r.prefill_tok_s)},
                  {"decode_tok_s", r.decode_tok_s ? stats_json(*r.decode_tok_s) : Json(nullptr)},
                  {"ttft_ms", r.ttft_ms},
                  {"model_bytes", model.weight_bytes()},
                  {"bits_per_param", bits},
                  {"kv_type", kernels::kv_type_name(kv_type)},
                  {"kv_bytes_per_token", kv.bytes_per_token()},
                  {"state_bytes_per_sequence", kv.state_bytes()},
                  {"decode_read_bytes", model.decode_read_bytes()},
                  {"decode_kv_read_bytes", (int64_t)kv_read},
                  {"peak_rss_bytes", peak_rss},
                  {"read_bandwidth_gbs", bw},
                  {"read_bandwidth_lowest_gbs", host.lowest},
                  {"other_procs_cpu_cores", r.other_cores}};
        if (bw > 0 && r.decode_tok_s) j["decode_bandwidth_pct"] = 100 * read_gbs / bw;
        std::printf("%s\n", j.dump().c_str());
      } else {
        double busy = 0;
        for (double c : r.other_cores) busy = std::max(busy, c);
        std::string decode = r.decode_tok_s ? with_spread(*r.decode_tok_s, 2) : "-";
        std::string share = bw > 0 && r.decode_tok_s ? fmt::format("{:.0f}%", 100 * read_gbs / bw) : "-";
        std::string test = test_name(r.prompt_tokens, a->gen_tokens) + (adapted ? " +lora" : "");
        std::printf("%-14s %16s %9.1f %16s %9s %6.0f MB%s\n", test.c_str(),
                    with_spread(r.prefill_tok_s, 1).c_str(), r.ttft_ms, decode.c_str(), share.c_str(),
                    (double)peak_rss / 1e6, busy_note(busy).c_str());
      }
      std::fflush(stdout);
    };
    // With --lora: the base and the adapted model measured in turn, rep by rep (runtime/bench.h).
    std::vector<std::vector<LoraUse>> variants = {{}};
    if (!m.loras.empty()) variants.push_back(lora_uses(m.loras));
    for (int64_t p : ps) {
      std::vector<BenchRun> runs = bench_interleaved(model, p, a->gen_tokens, a->reps, a->warmup, base, variants);
      const size_t peak = peak_rss_bytes();
      if (bw > 0 && !gpu) {
        // Probed again after every run and the best kept: on a shared machine one probe can meet a
        // busy neighbour (consecutive processes read 38-65 GB/s on the same box) and then the
        // share would overstate what the decode reached (docs/kernels.md).
        const ReadBandwidth again = measure_read_bandwidth();
        reset_peak_rss();
        if (again.best > bw * 1.05 && !a->json)
          std::printf("(read bandwidth probed again after the run: %.1f GB/s; the share uses it)\n", again.best);
        if (!a->json) std::printf("%s", unsteady_line(again).c_str());
        bw = std::max(bw, again.best);
        host.lowest = std::min(host.lowest, again.lowest);
      }
      for (size_t v = 0; v < runs.size(); v++) print_run(runs[v], v > 0, peak);
      if (runs.size() == 2 && runs[0].decode_tok_s && !a->json) {  // the median of each rep's pair
        std::vector<double> ratio;
        for (size_t i = 0; i < runs[0].decode_reps.size(); i++) ratio.push_back(runs[1].decode_reps[i] / runs[0].decode_reps[i]);
        Stats s = stats_of(ratio);
        std::printf("%-14s %16s %9s %16s   decode of each rep's adapted / base run, min..max %.1f..%.1f%%\n", "  lora/base", "",
                    "", fmt::format("{:.1f}%", 100 * s.median).c_str(), 100 * s.min, 100 * s.max);
      }
    }
    if (!a->json) busy_footnote();
  });
}

}  // namespace kvad::cli
