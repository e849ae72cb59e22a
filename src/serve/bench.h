// The benchmark page's two measurements.
//  - ModelBenchJob: prefill and decode speed of the loaded model at a few prompt lengths (an engine
//    job on a fresh session, so it measures the engine, not HTTP).
//  - LoadRunner: N concurrent streaming clients against this server over loopback for a bounded
//    time; reports throughput against time to first token and inter-token latency, and how many
//    requests were refused (429) -- the number continuous batching exists to change.
#pragma once
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/json.h"
#include "serve/engine_thread.h"

namespace kvad::serve {

class ModelBenchJob final : public Job {
 public:
  ModelBenchJob(std::vector<int64_t> prompt_lengths, int64_t decode_tokens)
      : lengths_(std::move(prompt_lengths)), decode_(decode_tokens) {}
  const char* kind() const override { return "benchmark"; }
  void run(ModelHost& e) override;
  void publish() override;
  void fail(const std::string& message, int status) override;
  void cancel() override { cancelled_ = true; }
  // Blocks until done; returns the result or throws HttpError.
  Json wait();

 private:
  std::vector<int64_t> lengths_;
  int64_t decode_;
  std::atomic<bool> cancelled_{false};
  Json result_;
  std::string error_;
  int status_ = 500;
  bool done_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
};

struct LoadRunParams {
  int streams = 4;         // concurrent clients, 1..64
  double seconds = 20;     // how long new requests are started, 1..600
  int max_tokens = 32;     // per request
  std::string prompt = "Write a short story about a lighthouse keeper.";
  bool retry_busy = true;  // after a 429, wait Retry-After (capped) and try again
};

class LoadRunner {
 public:
  ~LoadRunner();
  void set_target(const std::string& host, int port, const std::string& api_key);
  // Starts a run in the background; throws HttpError(409) if one is running.
  void start(const LoadRunParams& p);
  Json status() const;  // progress, per-second timeline, latency percentiles
  void cancel();

 private:
  struct Sample {
    double t_start, ttft, total;  // seconds since the run began / latencies
    double ttft_waiting;          // from this client's first attempt (429s retried) to its first token
    int status, tokens;
    std::vector<double> itl;      // inter-token gaps
  };
  void client(int index);
  std::string host_, key_;
  int port_ = 0;
  LoadRunParams p_;
  mutable std::mutex mu_;
  std::vector<Sample> samples_;
  std::vector<std::pair<double, int>> token_times_;  // (t, stream) of every token received
  std::vector<std::thread> threads_;
  std::thread joiner_;
  std::atomic<bool> running_{false}, cancel_{false};
  std::chrono::steady_clock::time_point t0_;
  double elapsed_ = 0;
  int errors_ = 0;
  std::string last_error_;
};

// Percentile (0..100) of a list; 0 when empty.
double percentile(std::vector<double> v, double p);

}  // namespace kvad::serve
