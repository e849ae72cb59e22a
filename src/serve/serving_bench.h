// The serving benchmark (`kvad bench serve`, and the web UI's benchmark page): drives any
// OpenAI-compatible server over HTTP -- kvad's own or another (llama.cpp's llama-server, vLLM) --
// with N concurrent streams or a Poisson request rate, random prompts of given input/output
// lengths, and reports what vLLM's serving benchmark reports: successful requests, duration,
// request / output / total token throughput, and mean / median / p99 of TTFT, TPOT, ITL and E2E
// latency. Definitions (vLLM's):
//   TTFT  send -> first chunk carrying text
//   ITL   gaps between successive chunks carrying text
//   E2EL  send -> last chunk
//   TPOT  (E2EL - TTFT) / (output tokens - 1), per request with more than one token
// Output tokens are the server's usage.completion_tokens.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/json.h"

namespace kvad::serve {

struct ServingBenchParams {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;
  std::string model;                  // "model" field sent ("" = the server's default)
  std::string endpoint = "/v1/completions";
  int concurrency = 1;                // requests in flight at most
  double request_rate = std::numeric_limits<double>::infinity();  // requests/s (Poisson); inf = all at once
  int num_prompts = 32;
  int input_len = 128, output_len = 128;
  double range_ratio = 0;             // lengths uniform in [L(1-r), L(1+r)]
  int token_lo = 100, token_hi = 20000;  // prompt token ids drawn from [lo, hi)
  int shared_prefix = 0;              // tokens every prompt starts with (prefix caching)
  uint64_t seed = 0;
  bool ignore_eos = true;             // exactly output_len tokens per request
  // Multi-turn conversations (chat endpoint): each of `conversations` sends `turns` requests in
  // order, every one carrying the whole history (its system prompt, earlier questions and the
  // answers the server gave) plus a new question of ~input_len words. Replaces num_prompts. The
  // result's prefix-cache hit rate says how much of those histories the server found cached.
  int conversations = 0, turns = 4;
  double timeout_s = 600;
  const std::atomic<bool>* cancel = nullptr;  // when set: no new requests, streams in flight are cut
};

struct LatencyStats {
  double mean = 0, median = 0, p99 = 0, stdev = 0;  // milliseconds
  Json to_json() const;
};

struct ServingBenchResult {
  ServingBenchParams params;
  int completed = 0, failed = 0;
  std::string first_error;
  double duration_s = 0;
  int64_t total_input = 0, total_output = 0;
  int64_t cached_input = 0;  // prompt tokens the server reported as cached (usage.prompt_tokens_details)
  double prefix_cache_hit_rate() const { return total_input ? (double)cached_input / (double)total_input : 0; }
  double request_throughput = 0, output_throughput = 0, total_token_throughput = 0, peak_output_throughput = 0;
  LatencyStats ttft, tpot, itl, e2el;
  Json to_json() const;
};

// Runs one benchmark; `progress(done, total)` after each request (any thread).
ServingBenchResult run_serving_bench(const ServingBenchParams& p,
                                     const std::function<void(int, int)>& progress = {});

// vLLM's printed block for one result.
std::string format_serving_result(const ServingBenchResult& r);
// One line per result (a sweep), for the side-by-side table.
std::string format_serving_table(const std::vector<ServingBenchResult>& rs);

}  // namespace kvad::serve
