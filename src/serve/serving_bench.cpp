#include "serve/serving_bench.h"

#include "serve/sse_events.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <random>
#include <thread>

#include <fmt/format.h>

namespace kvad::serve {

using Clock = std::chrono::steady_clock;

namespace {

struct RequestOutcome {
  bool ok = false;
  std::string error;
  int64_t input = 0, output = 0, cached = 0;
  std::string text;           // the answer (a conversation's next turn carries it)
  double ttft = 0, e2el = 0;  // seconds
  std::vector<double> itl;
  std::vector<double> token_times;  // since the benchmark began
};

LatencyStats latency(std::vector<double> v) {  // seconds in, ms out
  LatencyStats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / (double)v.size() * 1e3;
  size_t n = v.size();
  s.median = (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2])) * 1e3;
  double idx = 0.99 * (double)(n - 1);  // numpy's linear interpolation, as vLLM's np.percentile
  size_t lo = (size_t)idx, hi = std::min(lo + 1, n - 1);
  s.p99 = (v[lo] + (v[hi] - v[lo]) * (idx - (double)lo)) * 1e3;
  double var = 0;
  for (double x : v) var += (x * 1e3 - s.mean) * (x * 1e3 - s.mean);
  s.stdev = std::sqrt(var / (double)n);
  return s;
}

// A chat prompt is text: the ids' decoding is not known here, so they go as numbers.
std::string words_of(const std::vector<int32_t>& ids) {
  std::string text;
  for (int32_t t : ids) text += std::to_string(t % 1000) + " ";
  return text;
}

// One streamed request. `content` holds the prompt ("prompt" ids) or the "messages"; `input` is
// the prompt's length as sent (the server's usage.prompt_tokens replaces it when reported).
RequestOutcome send_one(const ServingBenchParams& p, Json content, int64_t input, int out_len, Clock::time_point bench_t0) {
  RequestOutcome o;
  o.input = input;
  httplib::Client cli(p.host, p.port);
  cli.set_read_timeout((time_t)p.timeout_s);
  cli.set_connection_timeout(10);
  Json body = std::move(content);
  body.update(Json{{"stream", true}, {"stream_options", {{"include_usage", true}}}, {"max_tokens", out_len},
                   {"temperature", 0}, {"ignore_eos", p.ignore_eos}});
  if (!p.model.empty()) body["model"] = p.model;
  httplib::Request req;
  req.method = "POST";
  req.path = p.endpoint;
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  if (!p.api_key.empty()) req.set_header("Authorization", "Bearer " + p.api_key);
  SseJsonEvents events;
  auto t0 = Clock::now();
  double last = -1;
  int64_t usage = -1, chunks = 0, prompt_usage = -1;
  req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    events.feed(data, len, [&](const Json& j) {
      if (j.contains("usage") && j["usage"].is_object()) {
        const Json& u = j["usage"];
        if (u.contains("completion_tokens") && u["completion_tokens"].is_number_integer())
          usage = u["completion_tokens"].get<int64_t>();
        if (u.contains("prompt_tokens") && u["prompt_tokens"].is_number_integer())
          prompt_usage = u["prompt_tokens"].get<int64_t>();
        const Json* d = u.contains("prompt_tokens_details") && u["prompt_tokens_details"].is_object() ? &u["prompt_tokens_details"] : nullptr;
        if (d && d->contains("cached_tokens") && (*d)["cached_tokens"].is_number_integer())
          o.cached = (*d)["cached_tokens"].get<int64_t>();
      }
      if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) return;
      const Json& c = j["choices"][0];
      std::string text;
      if (c.contains("text") && c["text"].is_string()) text = c["text"].get<std::string>();
      else if (c.contains("delta") && c["delta"].contains("content") && c["delta"]["content"].is_string())
        text = c["delta"]["content"].get<std::string>();
      if (text.empty()) return;
      o.text += text;
      double t = std::chrono::duration<double>(Clock::now() - t0).count();
      if (last < 0) o.ttft = t;
      else o.itl.push_back(t - last);
      last = t;
      chunks++;
      o.token_times.push_back(std::chrono::duration<double>(Clock::now() - bench_t0).count());
    });
    return !(p.cancel && p.cancel->load());
  };
  auto res = cli.send(req);
  o.e2el = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!res) {
    o.error = "connection: " + httplib::to_string(res.error());
  } else if (res->status != 200) {
    o.error = fmt::format("HTTP {}: {}", res->status, res->body.substr(0, 200));
  } else if (chunks == 0) {
    o.error = "no tokens in the stream";
  } else {
    o.ok = true;
    o.output = usage >= 0 ? usage : chunks;
    if (prompt_usage >= 0) o.input = prompt_usage;
    if (last >= 0) o.e2el = last;  // the last token chunk, as vLLM measures it
  }
  return o;
}

}  // namespace

Json LatencyStats::to_json() const { return {{"mean", mean}, {"median", median}, {"p99", p99}, {"std", stdev}}; }

namespace {

using RequestSender = std::function<RequestOutcome(int i, Clock::time_point t0)>;

// Runs `n` requests over `lanes` threads, request i not before arrive[i] (seconds from the start).
std::vector<RequestOutcome> run_requests(const ServingBenchParams& p, int n, int lanes, const std::vector<double>& arrive,
                                         const RequestSender& send, const std::function<void(int, int)>& progress,
                                         Clock::time_point t0) {
  std::vector<RequestOutcome> outcomes((size_t)n);
  std::atomic<int> next{0}, done{0};
  auto worker = [&] {
    for (;;) {
      int i = next++;
      if (i >= n || (p.cancel && p.cancel->load())) return;
      double wait = arrive.empty() ? 0 : arrive[(size_t)i] - std::chrono::duration<double>(Clock::now() - t0).count();
      if (wait > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait));
      outcomes[(size_t)i] = send(i, t0);
      int d = ++done;
      if (progress) progress(d, n);
    }
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < std::max(1, std::min(lanes, n)); i++) threads.emplace_back(worker);
  for (auto& t : threads) t.join();
  return outcomes;
}

}  // namespace

ServingBenchResult run_serving_bench(const ServingBenchParams& p, const std::function<void(int, int)>& progress) {
  std::mt19937_64 rng(p.seed);
  auto len_of = [&](int L) {
    int lo = (int)std::floor(L * (1 - p.range_ratio)), hi = (int)std::ceil(L * (1 + p.range_ratio));
    return std::max(1, lo + (int)(rng() % (uint64_t)std::max(1, hi - lo + 1)));
  };
  std::uniform_int_distribution<int32_t> tok(p.token_lo, std::max(p.token_lo, p.token_hi - 1));
  auto random_ids = [&](int n) {
    std::vector<int32_t> ids;
    for (int t = 0; t < n; t++) ids.push_back(tok(rng));
    return ids;
  };
  std::vector<int32_t> prefix = random_ids(p.shared_prefix);
  std::vector<RequestOutcome> outcomes;
  int requests = p.num_prompts;
  auto t0 = Clock::now();
  if (p.conversations > 0) {
    // Each conversation: a system prompt (the shared prefix + its own words), then turns of
    // questions; a lane takes one conversation and sends its turns in order.
    requests = p.conversations * p.turns;
    std::vector<std::vector<std::string>> questions((size_t)p.conversations);
    std::vector<std::string> systems;
    std::vector<int> outs;
    for (int c = 0; c < p.conversations; c++) {
      systems.push_back(words_of(prefix) + words_of(random_ids(len_of(p.input_len))));
      for (int t = 0; t < p.turns; t++) questions[(size_t)c].push_back(words_of(random_ids(len_of(p.input_len))));
      outs.push_back(len_of(p.output_len));
    }
    std::vector<std::vector<RequestOutcome>> turns((size_t)p.conversations);
    auto conversation = [&](int c, Clock::time_point start) {
      Json messages = Json::array({{{"role", "system"}, {"content", systems[(size_t)c]}}});
      for (int t = 0; t < p.turns; t++) {
        messages.push_back({{"role", "user"}, {"content", questions[(size_t)c][(size_t)t]}});
        RequestOutcome o = send_one(p, Json{{"messages", messages}}, 0, outs[(size_t)c], start);
        messages.push_back({{"role", "assistant"}, {"content", o.text}});
        bool ok = o.ok;
        turns[(size_t)c].push_back(std::move(o));
        if (!ok) break;  // the conversation ends at a failed turn: the rest count as not sent
      }
      return RequestOutcome{};
    };
    std::function<void(int, int)> per_conversation;
    if (progress) per_conversation = [&](int d, int) { progress(d * p.turns, requests); };
    run_requests(p, p.conversations, p.concurrency, {}, conversation, per_conversation, t0);
    for (auto& c : turns) {
      for (RequestOutcome& o : c) outcomes.push_back(std::move(o));
      for (size_t t = c.size(); t < (size_t)p.turns; t++) {
        RequestOutcome skipped;
        skipped.error = "an earlier turn failed";
        outcomes.push_back(std::move(skipped));
      }
    }
  } else {
    std::vector<std::vector<int32_t>> prompts;
    std::vector<int> outs;
    for (int i = 0; i < p.num_prompts; i++) {
      std::vector<int32_t> pr = prefix;
      std::vector<int32_t> own = random_ids(len_of(p.input_len));
      pr.insert(pr.end(), own.begin(), own.end());
      prompts.push_back(std::move(pr));
      outs.push_back(len_of(p.output_len));
    }
    // Arrival times: all at 0, or a Poisson process (exponential gaps) at request_rate.
    std::vector<double> arrive((size_t)p.num_prompts, 0.0);
    if (std::isfinite(p.request_rate) && p.request_rate > 0) {
      std::exponential_distribution<double> gap(p.request_rate);
      double t = 0;
      for (auto& a : arrive) a = (t += gap(rng));
    }
    bool chat = p.endpoint.find("chat") != std::string::npos;
    outcomes = run_requests(p, p.num_prompts, p.concurrency, arrive, [&](int i, Clock::time_point start) {
      const std::vector<int32_t>& pr = prompts[(size_t)i];
      Json content = chat ? Json{{"messages", Json::array({{{"role", "user"}, {"content", words_of(pr)}}})}}
                          : Json{{"prompt", pr}};
      return send_one(p, std::move(content), (int64_t)pr.size(), outs[(size_t)i], start);
    }, progress, t0);
  }

  ServingBenchResult r;
  r.params = p;
  r.params.num_prompts = requests;
  r.duration_s = std::chrono::duration<double>(Clock::now() - t0).count();
  std::vector<double> ttft, tpot, itl, e2el, times;
  for (const RequestOutcome& o : outcomes) {
    if (!o.ok) {
      r.failed++;
      if (r.first_error.empty()) r.first_error = o.error;
      continue;
    }
    r.completed++;
    r.total_input += o.input;
    r.cached_input += o.cached;
    r.total_output += o.output;
    ttft.push_back(o.ttft);
    e2el.push_back(o.e2el);
    if (o.output > 1) tpot.push_back((o.e2el - o.ttft) / (double)(o.output - 1));
    itl.insert(itl.end(), o.itl.begin(), o.itl.end());
    times.insert(times.end(), o.token_times.begin(), o.token_times.end());
  }
  r.request_throughput = r.completed / r.duration_s;
  r.output_throughput = (double)r.total_output / r.duration_s;
  r.total_token_throughput = (double)(r.total_input + r.total_output) / r.duration_s;
  std::vector<int> per_second((size_t)std::ceil(r.duration_s) + 1, 0);  // chunks per 1-s bucket
  for (double t : times) per_second[std::min(per_second.size() - 1, (size_t)t)]++;
  for (int c : per_second) r.peak_output_throughput = std::max(r.peak_output_throughput, (double)c);
  r.ttft = latency(ttft);
  r.tpot = latency(tpot);
  r.itl = latency(itl);
  r.e2el = latency(e2el);
  return r;
}

Json ServingBenchResult::to_json() const {
  return {{"concurrency", params.concurrency},
          {"request_rate", std::isfinite(params.request_rate) ? Json(params.request_rate) : Json("inf")},
          {"num_prompts", params.num_prompts},
          {"input_len", params.input_len},
          {"output_len", params.output_len},
          {"completed", completed},
          {"failed", failed},
          {"first_error", first_error},
          {"duration", duration_s},
          {"total_input_tokens", total_input},
          {"cached_input_tokens", cached_input},
          {"prefix_cache_hit_rate", prefix_cache_hit_rate()},
          {"conversations", params.conversations},
          {"turns", params.turns},
          {"total_output_tokens", total_output},
          {"request_throughput", request_throughput},
          {"output_throughput", output_throughput},
          {"total_token_throughput", total_token_throughput},
          {"max_output_tokens_per_s", peak_output_throughput},
          {"mean_ttft_ms", ttft.mean}, {"median_ttft_ms", ttft.median}, {"p99_ttft_ms", ttft.p99}, {"std_ttft_ms", ttft.stdev},
          {"mean_tpot_ms", tpot.mean}, {"median_tpot_ms", tpot.median}, {"p99_tpot_ms", tpot.p99}, {"std_tpot_ms", tpot.stdev},
          {"mean_itl_ms", itl.mean}, {"median_itl_ms", itl.median}, {"p99_itl_ms", itl.p99}, {"std_itl_ms", itl.stdev},
          {"mean_e2el_ms", e2el.mean}, {"median_e2el_ms", e2el.median}, {"p99_e2el_ms", e2el.p99}, {"std_e2el_ms", e2el.stdev}};
}

std::string format_serving_result(const ServingBenchResult& r) {
  std::string s;
  auto line = [&](const std::string& k, const std::string& v) { s += fmt::format("{:<40}{:>12}\n", k, v); };
  auto num = [](double x) { return fmt::format("{:.2f}", x); };
  s += fmt::format("{:=^52}\n", " Serving Benchmark Result ");
  line("Concurrency:", std::to_string(r.params.concurrency));
  line("Successful requests:", std::to_string(r.completed));
  line("Failed requests:", std::to_string(r.failed));
  line("Benchmark duration (s):", num(r.duration_s));
  line("Total input tokens:", std::to_string(r.total_input));
  if (r.params.conversations > 0) {
    line("Conversations x turns:", fmt::format("{} x {}", r.params.conversations, r.params.turns));
    line("Cached input tokens:", std::to_string(r.cached_input));
    line("Prefix cache hit rate (%):", num(100 * r.prefix_cache_hit_rate()));
  }
  line("Total generated tokens:", std::to_string(r.total_output));
  line("Request throughput (req/s):", num(r.request_throughput));
  line("Output token throughput (tok/s):", num(r.output_throughput));
  line("Peak output token throughput (tok/s):", num(r.peak_output_throughput));
  line("Total token throughput (tok/s):", num(r.total_token_throughput));
  for (auto [name, l] : {std::pair<const char*, const LatencyStats*>{"Time to First Token", &r.ttft},
                         {"Time per Output Token (excl. 1st token)", &r.tpot},
                         {"Inter-token Latency", &r.itl},
                         {"End-to-end Latency", &r.e2el}}) {
    std::string tag = std::string(name) == "Time to First Token" ? "TTFT"
                      : std::string(name) == "Inter-token Latency" ? "ITL"
                      : std::string(name) == "End-to-end Latency" ? "E2EL" : "TPOT";
    s += fmt::format("{:-^52}\n", std::string(" ") + name + " ");
    line("Mean " + tag + " (ms):", num(l->mean));
    line("Median " + tag + " (ms):", num(l->median));
    line("P99 " + tag + " (ms):", num(l->p99));
  }
  s += std::string(52, '=') + "\n";
  if (!r.first_error.empty()) s += "first error: " + r.first_error + "\n";
  return s;
}

std::string format_serving_table(const std::vector<ServingBenchResult>& rs) {
  std::string s = fmt::format("{:>5} {:>5} {:>9} {:>10} {:>11} {:>11} {:>10} {:>10} {:>10} {:>10}\n", "conc", "ok",
                              "req/s", "out tok/s", "TTFT med", "TTFT p99", "TPOT med", "ITL med", "ITL p99", "E2EL med");
  for (const ServingBenchResult& r : rs)
    s += fmt::format("{:>5} {:>5} {:>9.2f} {:>10.1f} {:>9.1f}ms {:>9.1f}ms {:>8.1f}ms {:>8.1f}ms {:>8.1f}ms {:>8.0f}ms\n",
                     r.params.concurrency, r.completed, r.request_throughput, r.output_throughput, r.ttft.median,
                     r.ttft.p99, r.tpot.median, r.itl.median, r.itl.p99, r.e2el.median);
  return s;
}

}  // namespace kvad::serve
