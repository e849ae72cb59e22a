#include "serve/bench.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>

#include "core/cpu.h"
#include "core/rng.h"
#include "core/threads.h"
#include "runtime/bench.h"
#include "serve/openai.h"
#include "serve/sse_events.h"

namespace kvad::serve {

using clock_type = std::chrono::steady_clock;

static double since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  double idx = p / 100.0 * (double)(v.size() - 1);
  size_t lo = (size_t)idx, hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (idx - (double)lo);
}

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

// ---- concurrent load -------------------------------------------------------------------------

LoadRunner::~LoadRunner() {
  cancel();
  if (joiner_.joinable()) joiner_.join();
}

void LoadRunner::set_target(const std::string& host, int port, const std::string& key) {
  host_ = host;
  port_ = port;
  key_ = key;
}

void LoadRunner::start(const LoadRunParams& p) {
  if (running_.exchange(true)) throw HttpError(409, "a load run is already in progress", "invalid_request_error");
  if (joiner_.joinable()) joiner_.join();
  {
    std::lock_guard<std::mutex> lk(mu_);
    p_ = p;
    samples_.clear();
    token_times_.clear();
    errors_ = 0;
    last_error_.clear();
    elapsed_ = 0;
    t0_ = clock_type::now();
  }
  cancel_ = false;
  threads_.clear();
  for (int i = 0; i < p.streams; i++) threads_.emplace_back([this, i] { client(i); });
  joiner_ = std::thread([this] {
    for (auto& t : threads_) t.join();
    {
      std::lock_guard<std::mutex> lk(mu_);
      elapsed_ = since(t0_);
    }
    running_ = false;
  });
}

void LoadRunner::cancel() { cancel_ = true; }

void LoadRunner::client(int index) {
  httplib::Client cli(host_, port_);
  cli.set_read_timeout(300);
  cli.set_keep_alive(true);
  httplib::Headers headers;
  if (!key_.empty()) headers.emplace("Authorization", "Bearer " + key_);
  uint64_t n = 0;
  double wanted = -1;  // when this client began trying to get its current request served
  while (!cancel_ && since(t0_) < p_.seconds) {
    Json body = {{"messages", Json::array({{{"role", "user"}, {"content", p_.prompt}}})},
                 {"stream", true},
                 {"stream_options", {{"include_usage", true}}},
                 {"max_tokens", p_.max_tokens},
                 {"temperature", 0.8},
                 {"seed", index * 100000 + (int64_t)n++}};
    Sample s{};
    s.t_start = since(t0_);
    if (wanted < 0) wanted = s.t_start;
    auto start = clock_type::now();
    double last = -1;
    SseJsonEvents events;
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/chat/completions";
    req.headers = headers;
    req.body = body.dump();
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
      events.feed(data, len, [&](const Json& j) {
        if (j.contains("usage") && j["usage"].is_object()) s.tokens = j["usage"]["completion_tokens"].get<int>();
        if (!j.contains("choices") || j["choices"].empty()) return;
        const Json& d = j["choices"][0]["delta"];
        if (!d.contains("content") || !d["content"].is_string() || d["content"].get<std::string>().empty()) return;
        double t = since(start);
        if (last < 0) s.ttft = t;
        else s.itl.push_back(t - last);
        last = t;
        std::lock_guard<std::mutex> lk(mu_);
        token_times_.push_back({since(t0_), index});
      });
      return !cancel_.load();
    };
    auto res = cli.send(req);
    s.total = since(start);
    if (!res) {
      if (cancel_) break;
      std::lock_guard<std::mutex> lk(mu_);
      errors_++;
      last_error_ = httplib::to_string(res.error());
      s.status = 0;
    } else {
      s.status = res->status;
    }
    int status = s.status;
    if (status == 200) {
      s.ttft_waiting = s.t_start - wanted + s.ttft;
      wanted = -1;
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      samples_.push_back(std::move(s));
    }
    if (status == 429 || status == 0) {
      if (!p_.retry_busy) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(status == 0 ? 500 : 100 + 37 * (index % 7)));
    }
  }
}

Json LoadRunner::status() const {
  std::lock_guard<std::mutex> lk(mu_);
  double elapsed = running_ ? since(t0_) : elapsed_;
  int ok = 0, busy = 0, other = 0;
  int64_t tokens = 0;
  std::vector<double> ttft, itl, total, waiting;
  Json reqs = Json::array();
  for (const Sample& s : samples_) {
    if (s.status == 200) {
      ok++;
      tokens += s.tokens;
      if (s.ttft > 0) ttft.push_back(s.ttft), waiting.push_back(s.ttft_waiting);
      itl.insert(itl.end(), s.itl.begin(), s.itl.end());
      total.push_back(s.total);
    } else if (s.status == 429) {
      busy++;
    } else {
      other++;
    }
  }
  size_t first = samples_.size() > 400 ? samples_.size() - 400 : 0;
  for (size_t i = first; i < samples_.size(); i++) {
    const Sample& s = samples_[i];
    reqs.push_back({{"t", s.t_start}, {"status", s.status}, {"ttft", s.ttft}, {"ttft_waiting", s.ttft_waiting},
                    {"tokens", s.tokens}, {"total", s.total}});
  }
  // Tokens per second, per one-second bucket.
  int buckets = std::max(1, (int)std::ceil(elapsed));
  std::vector<int> per_s((size_t)buckets, 0);
  for (const auto& [t, stream] : token_times_) {
    int b = std::min(buckets - 1, std::max(0, (int)t));
    per_s[(size_t)b]++;
  }
  Json timeline = Json::array();
  for (int b = 0; b < buckets; b++) timeline.push_back({{"t", b}, {"tokens", per_s[(size_t)b]}});
  auto pct = [](const std::vector<double>& v) {
    return Json{{"p50", percentile(v, 50)}, {"p90", percentile(v, 90)}, {"p99", percentile(v, 99)}, {"n", v.size()}};
  };
  return {{"running", running_.load()},
          {"elapsed", elapsed},
          {"params",
           {{"streams", p_.streams}, {"seconds", p_.seconds}, {"max_tokens", p_.max_tokens}, {"retry_busy", p_.retry_busy}}},
          {"requests", {{"ok", ok}, {"busy", busy}, {"errors", other}}},
          {"last_error", last_error_},
          {"tokens", (int64_t)token_times_.size()},
          {"throughput_tok_s", elapsed > 0 ? (double)token_times_.size() / elapsed : 0},
          {"ttft", pct(ttft)},
          {"ttft_waiting", pct(waiting)},
          {"itl", pct(itl)},
          {"latency", pct(total)},
          {"timeline", timeline},
          {"recent", reqs}};
}

}  // namespace kvad::serve
