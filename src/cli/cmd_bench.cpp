// kvad bench: prefill and decode speed, time to first token, model bytes and peak RSS, in the
// manner of llama-bench; --json prints one line per prompt length shaped like the peer harness's
// bench output so the two compare directly.
#include <cstdio>
#include <sstream>

#include "cli/common.h"
#include "core/cpu.h"
#include "core/error.h"
#include "core/threads.h"
#include "runtime/bench.h"

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

static Json stats_json(const Stats& s) { return {{"min", s.min}, {"median", s.median}, {"max", s.max}}; }

void add_bench(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "measure prefill and decode speed of a model");
  struct Args {
    ModelArgs model;
    std::string prompt_tokens = "128,512";
    int64_t gen_tokens = 128;
    int reps = 5, warmup = 1;
    bool json = false, no_bandwidth = false;
  };
  auto a = std::make_shared<Args>();
  add_model_args(cmd, a->model);
  cmd->add_option("-p,--prompt-tokens", a->prompt_tokens, "prompt lengths to measure, e.g. 128,512 (default)");
  cmd->add_option("-g,--gen-tokens", a->gen_tokens, "decode steps after the prompt (default 128; 0 = prefill only)");
  cmd->add_option("-r,--reps", a->reps, "measured repetitions (default 5)")->check(CLI::Range(1, 1000));
  cmd->add_option("--warmup", a->warmup, "unmeasured repetitions first (default 1)")->check(CLI::Range(0, 100));
  cmd->add_flag("--json", a->json, "one JSON object per prompt length");
  cmd->add_flag("--no-bandwidth", a->no_bandwidth, "skip the memory-bandwidth probe");
  cmd->callback([a] {
    std::vector<int64_t> ps = parse_list(a->prompt_tokens, "--prompt-tokens");
    if (a->gen_tokens < 0) fail("--gen-tokens must be >= 0");
    LoadedModel m = load_from_args(a->model);
    const Model& model = *m.model;
    for (int64_t p : ps)
      if (p < 1 || p + a->gen_tokens > model.context_length())
        fail("--prompt-tokens {} + --gen-tokens {} must be >= 1 and fit the model's context of {}", p, a->gen_tokens,
             model.context_length());
    double bw = a->no_bandwidth ? 0 : measure_read_bandwidth_gbs();
    double bits = (double)model.weight_bytes() * 8 / (double)model.parameter_count();
    if (!a->json)
      std::printf("%s | %s | %.1fM params | %.1f MB weights (%.2f bits/param) | %d threads | %s\n", m.name.c_str(),
                  model.weight_format().c_str(), (double)model.parameter_count() / 1e6, (double)model.weight_bytes() / 1e6,
                  bits, pool().size(), cpu_summary().c_str());
    for (int64_t p : ps) {
      BenchRun r = bench_model(model, p, a->gen_tokens, a->reps, a->warmup);
      double read_gbs = r.decode_tok_s ? r.decode_tok_s->median * (double)model.decode_read_bytes() / 1e9 : 0;
      if (a->json) {
        Json j = {{"model", m.name},
                  {"quant", model.weight_format()},
                  {"threads", pool().size()},
                  {"prompt_tokens", p},
                  {"gen_tokens", a->gen_tokens},
                  {"reps", a->reps},
                  {"prefill_tok_s", stats_json(r.prefill_tok_s)},
                  {"decode_tok_s", r.decode_tok_s ? stats_json(*r.decode_tok_s) : Json(nullptr)},
                  {"ttft_ms", r.ttft_ms},
                  {"model_bytes", model.weight_bytes()},
                  {"bits_per_param", bits},
                  {"decode_read_bytes", model.decode_read_bytes()},
                  {"peak_rss_bytes", peak_rss_bytes()},
                  {"read_bandwidth_gbs", bw},
                  {"other_procs_cpu_cores", r.other_cores}};
        if (bw > 0 && r.decode_tok_s) j["decode_bandwidth_pct"] = 100 * read_gbs / bw;
        std::printf("%s\n", j.dump().c_str());
      } else {
        double busy = 0;
        for (double c : r.other_cores) busy = std::max(busy, c);
        std::printf("pp%-5lld prefill %8.1f tok/s (%.1f-%.1f) | ttft %7.1f ms", (long long)p, r.prefill_tok_s.median,
                    r.prefill_tok_s.min, r.prefill_tok_s.max, r.ttft_ms);
        if (r.decode_tok_s)
          std::printf(" | tg%lld decode %6.2f tok/s (%.2f-%.2f)", (long long)a->gen_tokens, r.decode_tok_s->median,
                      r.decode_tok_s->min, r.decode_tok_s->max);
        if (bw > 0 && r.decode_tok_s) std::printf(" = %.1f GB/s, %.0f%% of %.1f GB/s read bandwidth", read_gbs, 100 * read_gbs / bw, bw);
        std::printf(" | peak RSS %.0f MB%s\n", (double)peak_rss_bytes() / 1e6,
                    busy > 0.2 ? fmt::format(" | WARNING: other processes used up to {:.1f} cores", busy).c_str() : "");
      }
      std::fflush(stdout);
    }
  });
}

}  // namespace kvad::cli
