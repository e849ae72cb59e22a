#include "runtime/bench.h"

#include "runtime/engine.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include "core/error.h"
#include "core/huge_pages.h"
#include "core/rng.h"
#include "core/threads.h"
#include "kernels/sampling.h"
#include "kernels/stream.h"
#include "runtime/session.h"


namespace kvad {

using clock_type = std::chrono::steady_clock;

Stats stats_of(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.min = v.front();
  s.max = v.back();
  s.median = v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  return s;
}

static double seconds(clock_type::time_point a, clock_type::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

static int32_t argmax(const std::vector<float>& v) { return (int32_t)kernels::argmax(v.data(), (int64_t)v.size()); }

BenchRun bench_model(const Model& model, int64_t P, int64_t G, int reps, int warmup, kernels::KvType kv_type) {
  EngineOptions base;
  base.kv_type = kv_type;
  return bench_interleaved(model, P, G, reps, warmup, base, {{}})[0];
}

namespace {

// Timings of one variant's reps.
struct RepTimes {
  std::vector<double> pp, tg, ttft, other_cores;
};

void one_rep(Engine& engine, const std::vector<int32_t>& prompt, int64_t G, RepTimes& t) {
  std::unique_ptr<Session> s = engine.open_session();
  ForeignCpu foreign;
  auto t0 = clock_type::now();
  int32_t next = argmax(s->forward(prompt));
  auto t1 = clock_type::now();
  for (int64_t g = 0; g < G; g++) next = argmax(s->forward({next}));
  auto t2 = clock_type::now();
  t.other_cores.push_back(foreign.cores_since());
  t.pp.push_back((double)prompt.size() / seconds(t0, t1));
  t.ttft.push_back(seconds(t0, t1) * 1000);
  if (G > 0) t.tg.push_back((double)G / seconds(t1, t2));
}

}  // namespace

std::vector<BenchRun> bench_interleaved(const Model& model, int64_t P, int64_t G, int reps, int warmup,
                                        const EngineOptions& base, const std::vector<std::vector<LoraUse>>& variants) {
  Rng rng(1234567);
  std::vector<std::unique_ptr<Engine>> engines;
  for (const auto& loras : variants) {
    EngineOptions eo = base;
    eo.ctx = std::min(model.context_length(), P + G + 1);
    eo.loras = loras;
    engines.push_back(std::make_unique<Engine>(model, eo));
  }
  std::vector<RepTimes> times(variants.size());
  for (int rep = 0; rep < warmup + reps; rep++) {
    std::vector<int32_t> prompt((size_t)P);
    for (auto& t : prompt) t = (int32_t)rng.below((uint64_t)model.config().vocab_size);
    for (size_t v = 0; v < variants.size(); v++) {
      RepTimes scratch;
      one_rep(*engines[v], prompt, G, rep < warmup ? scratch : times[v]);
    }
  }
  std::vector<BenchRun> out;
  for (const RepTimes& t : times) {
    BenchRun r;
    r.prompt_tokens = P;
    r.gen_tokens = G;
    r.reps = reps;
    r.other_cores = t.other_cores;
    r.prefill_tok_s = stats_of(t.pp);
    if (G > 0) r.decode_tok_s = stats_of(t.tg);
    r.decode_reps = t.tg;
    r.ttft_ms = stats_of(t.ttft).median;
    out.push_back(r);
  }
  return out;
}

SpeculativeRun bench_speculative(const Model& model, const Tokenizer& tok, const std::vector<int32_t>& prompt,
                                 int64_t G, int reps, const SpeculativeOptions& spec) {
  if (G < 2 || reps < 1) fail("speculative bench: gen {} reps {} (need >= 2, >= 1)", G, reps);
  EngineOptions eo;
  eo.ctx = std::min<int64_t>(model.context_length(), (int64_t)prompt.size() + G + 1);
  if ((int64_t)prompt.size() + G > eo.ctx)
    fail("speculative bench: a prompt of {} tokens and {} more do not fit the context of {}", prompt.size(), G, eo.ctx);
  Engine engine(model, eo);
  GenerateOptions plain;
  plain.sampling.temperature = 0;
  plain.max_tokens = G;
  plain.reuse_prefix = false;
  GenerateOptions fast = plain;
  fast.speculative = spec;
  auto once = [&](const GenerateOptions& g) {
    auto s = engine.open_session();
    return generate(*s, tok, prompt, g, [](const TokenEvent&) { return true; });
  };
  once(plain);  // warm-up: page in the weights, grow the buffers
  once(fast);
  SpeculativeRun r;
  r.reps = reps;
  r.gen_tokens = G;
  std::vector<double> a, b, ratio;
  for (int i = 0; i < reps; i++) {
    ForeignCpu foreign;
    GenerateResult p, f;
    if (i % 2 == 0) p = once(plain), f = once(fast);
    else f = once(fast), p = once(plain);
    r.other_cores = std::max(r.other_cores, foreign.cores_since());
    a.push_back(p.decode_tok_s());
    b.push_back(f.decode_tok_s());
    ratio.push_back(b.back() / a.back());
    r.drafted += f.draft_tokens;
    r.kept += f.draft_accepted;
    r.same_output = r.same_output && p.tokens == f.tokens;
  }
  r.plain_tok_s = stats_of(a);
  r.spec_tok_s = stats_of(b);
  r.ratio = stats_of(ratio);
  return r;
}

BatchedRun bench_batched(const Model& model, const Tokenizer& tok, int64_t P, int64_t G, int64_t B,
                         const EngineOptions& base, const std::vector<LoraUse>& loras) {
  if (P < 1 || G < 2 || B < 1) fail("batched bench: prompt {} gen {} batch {} (need >= 1, >= 2, >= 1)", P, G, B);
  EngineOptions eo = base;
  eo.ctx = std::min(model.context_length(), P + G + 1);
  eo.max_running = B;
  eo.step_tokens = B * P;  // every prompt in the first step, as llama-batched-bench's PP
  Engine engine(model, eo);
  Rng rng(7654321);
  int64_t first_tokens = 0, finished = 0;
  for (int64_t i = 0; i < B; i++) {
    GenerationRequest req;
    req.prompt.resize((size_t)P);
    for (auto& t : req.prompt) t = (int32_t)rng.below((uint64_t)model.config().vocab_size);
    req.opts.sampling.temperature = 0;
    req.opts.max_tokens = G;
    req.opts.reuse_prefix = false;
    req.tokenizer = &tok;
    req.loras = loras;
    req.on_token = [&first_tokens, n = 0](const TokenEvent&) mutable {
      if (n++ == 0) first_tokens++;
      return true;
    };
    req.on_done = [&finished](GenerateResult&&, const std::string& error) {
      if (!error.empty()) fail("batched bench: {}", error);
      finished++;
    };
    engine.submit(std::move(req));
  }
  ForeignCpu foreign;
  auto t0 = clock_type::now();
  while (first_tokens < B && engine.has_work()) engine.step();
  auto t1 = clock_type::now();
  std::vector<double> steps;
  while (engine.has_work()) {
    auto s0 = clock_type::now();
    engine.step();
    steps.push_back(seconds(s0, clock_type::now()) * 1000);
  }
  auto t2 = clock_type::now();
  BatchedRun r;
  r.batch = B;
  r.prompt_tokens = P;
  r.gen_tokens = G;
  r.prefill_tok_s = (double)(B * P) / seconds(t0, t1);
  r.decode_tok_s = (double)(B * (G - 1)) / seconds(t1, t2);  // the first token came with the prefill
  r.step_ms = stats_of(steps).median;
  r.other_cores = foreign.cores_since();
  return r;
}

ReadBandwidth measure_read_bandwidth(size_t bytes) {
  bytes = bytes / 4096 * 4096;
  // In huge pages, as the weights it is the bound for are: 512 times fewer page faults to fill it
  // (with 4 KB pages the fill was most of the probe: ~4 s of a 1 GiB probe on a 2-vCPU VM).
  HugePageBuffer buf(bytes);
  pool().parallel_for((int64_t)bytes, 4096, [&](int64_t b, int64_t e) {
    std::memset(buf.data() + b, (int)(b & 0xff), (size_t)(e - b));  // real pages, not the zero page
  });
  ReadBandwidth r;
  // The best of several passes, with each instruction set's loads: on Zen 4 plain 64-bit loads
  // stream a little faster than 512-bit ones, and the bound should be the best the machine does.
  for (int rep = 0; rep < 9; rep++) {
    Isa isa = (Isa)std::min(rep % 3, (int)best_isa());
    auto t0 = clock_type::now();
    volatile uint64_t sink = kernels::stream_read_threads(buf.data(), bytes, isa);
    (void)sink;
    const double gbs = (double)bytes / seconds(t0, clock_type::now()) / 1e9;
    r.best = std::max(r.best, gbs);
    r.lowest = rep == 0 ? gbs : std::min(r.lowest, gbs);
  }
  return r;
}

size_t peak_rss_bytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmHWM:", 0) == 0) return (size_t)std::stoull(line.substr(6)) * 1024;  // "VmHWM:   123 kB"
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return (size_t)ru.ru_maxrss * 1024;
}

bool reset_peak_rss() {
  std::ofstream clear("/proc/self/clear_refs");  // "5": reset the peak RSS to the current RSS (Linux >= 4.0)
  clear << "5";
  clear.flush();
  return (bool)clear;
}

// /proc/stat: all CPUs' busy jiffies; /proc/self/stat: this process's utime + stime.
static double total_busy_seconds() {
  std::ifstream f("/proc/stat");
  std::string cpu;
  f >> cpu;
  double v[10] = {};
  for (double& x : v) f >> x;
  double busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];  // user nice system irq softirq steal
  return busy / (double)sysconf(_SC_CLK_TCK);
}

static double self_seconds() {
  std::ifstream f("/proc/self/stat");
  std::string line;
  std::getline(f, line);
  size_t close = line.rfind(')');
  std::istringstream in(line.substr(close + 2));
  std::string field;
  double utime = 0, stime = 0;
  for (int i = 3; i <= 15 && in >> field; i++) {
    if (i == 14) utime = std::stod(field);
    if (i == 15) stime = std::stod(field);
  }
  return (utime + stime) / (double)sysconf(_SC_CLK_TCK);
}

ForeignCpu::ForeignCpu()
    : wall0_(std::chrono::duration<double>(clock_type::now().time_since_epoch()).count()),
      total0_(total_busy_seconds()),
      self0_(self_seconds()) {}

double ForeignCpu::cores_since() const {
  double wall = std::chrono::duration<double>(clock_type::now().time_since_epoch()).count() - wall0_;
  if (wall <= 0) return 0;
  double other = (total_busy_seconds() - total0_) - (self_seconds() - self0_);
  return std::max(0.0, other / wall);
}

}  // namespace kvad
