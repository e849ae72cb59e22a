#include "serve/bench.h"

#include <algorithm>
#include <chrono>

#include "core/cpu.h"
#include "core/threads.h"
#include "runtime/bench.h"
#include "serve/openai.h"

namespace kvad::serve {

using clock_type = std::chrono::steady_clock;

static double since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

// ---- per-model prefill / decode -------------------------------------------------------------

void ModelBenchJob::run(ModelHost& e) {
  auto m = e.model();
  if (!m || !e.engine()) throw HttpError(404, "no model is loaded", "invalid_request_error", "model", "model_not_found");
  int64_t ctx = e.context_length();
  Json rows = Json::array();
  for (int64_t len : lengths_) {  // runtime/bench.h's loop: one rep per length, no warm-up
    if (cancelled_) break;
    int64_t L = std::clamp<int64_t>(len, 1, std::max<int64_t>(1, ctx - decode_ - 1));
    int64_t G = std::max<int64_t>(0, std::min<int64_t>(decode_, ctx - L - 1));
    BenchRun r = bench_model(*m->model, L, G, 1, 0);
    double prefill = r.ttft_ms / 1000, tg = r.decode_tok_s ? r.decode_tok_s->median : 0;
    rows.push_back({{"prompt_tokens", L},
                    {"prefill_seconds", prefill},
                    {"prefill_tok_s", r.prefill_tok_s.median},
                    {"decode_tokens", G},
                    {"decode_seconds", tg > 0 ? (double)G / tg : 0},
                    {"decode_tok_s", tg},
                    {"kv_bytes", (size_t)(L + G) * e.engine()->bytes_per_token()}});
  }
  result_ = {{"model", model_id(*m)},
             {"architecture", m->model->config().architecture},
             {"weight_format", m->model->weight_format()},
             {"weight_bytes", m->model->weight_bytes()},
             {"parameters", m->model->parameter_count()},
             {"threads", pool().size()},
             {"cpu", cpu_summary()},
             {"isa", isa_name(best_isa())},
             {"rows", rows}};
}

void ModelBenchJob::publish() {
  std::lock_guard<std::mutex> lk(mu_);
  done_ = true;
  cv_.notify_all();
}

void ModelBenchJob::fail(const std::string& message, int status) {
  std::lock_guard<std::mutex> lk(mu_);
  error_ = message;
  status_ = status;
  done_ = true;
  cv_.notify_all();
}

Json ModelBenchJob::wait() {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [&] { return done_; });
  if (!error_.empty()) throw HttpError(status_, error_, status_ >= 500 ? "server_error" : "invalid_request_error");
  return result_;
}

// ---- the serving sweep -----------------------------------------------------------------------

// Requests sent at one concurrency level: twice the level, at least 4.
static int requests_at(int concurrency) { return std::max(4, 2 * concurrency); }

ServingSweep::~ServingSweep() {
  cancel_ = true;
  if (thread_.joinable()) thread_.join();
}

void ServingSweep::set_target(const std::string& host, int port, const std::string& key) {
  host_ = host;
  port_ = port;
  key_ = key;
}

void ServingSweep::start(const SweepParams& p) {
  if (running_.exchange(true)) throw HttpError(409, "a serving benchmark is already running", "invalid_request_error");
  if (thread_.joinable()) thread_.join();
  {
    std::lock_guard<std::mutex> lk(mu_);
    p_ = p;
    results_.clear();
    level_ = 0;
    done_ = 0;
    error_.clear();
    t0_ = clock_type::now();
  }
  cancel_ = false;
  thread_ = std::thread([this] { run(); });
}

// One run_serving_bench per concurrency level, in order, against this server over loopback:
// `kvad bench serve`'s measurement, so the page and the CLI report the same figures.
void ServingSweep::run() {
  for (size_t i = 0; i < p_.levels.size() && !cancel_; i++) {
    ServingBenchParams b;
    b.host = host_;
    b.port = port_;
    b.api_key = key_;
    b.concurrency = p_.levels[i];
    b.num_prompts = requests_at(p_.levels[i]);
    b.input_len = p_.input_len;
    b.output_len = p_.output_len;
    b.token_lo = p_.token_lo;
    b.token_hi = p_.token_hi;
    b.seed = i;
    b.cancel = &cancel_;
    {
      std::lock_guard<std::mutex> lk(mu_);
      level_ = (int)i;
      done_ = 0;
    }
    ServingBenchResult r = run_serving_bench(b, [this](int d, int) {
      std::lock_guard<std::mutex> lk(mu_);
      done_ = d;
    });
    std::lock_guard<std::mutex> lk(mu_);
    if (cancel_) break;
    results_.push_back(r.to_json());
    if (r.completed == 0) {
      error_ = r.first_error.empty() ? "no request completed" : r.first_error;
      break;
    }
  }
  std::lock_guard<std::mutex> lk(mu_);
  elapsed_ = since(t0_);
  running_ = false;
}

Json ServingSweep::status() const {
  std::lock_guard<std::mutex> lk(mu_);
  Json levels = Json::array();
  for (int c : p_.levels) levels.push_back(c);
  int level = p_.levels.empty() ? 0 : p_.levels[(size_t)std::min<int>(level_, (int)p_.levels.size() - 1)];
  return {{"running", running_.load()},
          {"cancelled", cancel_.load()},
          {"elapsed", running_ ? since(t0_) : elapsed_},
          {"params", {{"levels", levels}, {"input_len", p_.input_len}, {"output_len", p_.output_len}}},
          {"current", {{"concurrency", level}, {"done", done_}, {"of", requests_at(level)}}},
          {"results", results_},
          {"error", error_}};
}

}  // namespace kvad::serve
