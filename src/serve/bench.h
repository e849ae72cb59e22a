// The benchmark page's two measurements.
//  - ModelBenchJob: prefill and decode speed of the loaded model at a few prompt lengths (an engine
//    job on a fresh session, so it measures the engine, not HTTP).
//  - ServingSweep: the serving benchmark over loopback at concurrency 1, 2, 4, 8, 16: throughput
//    against time to first token and inter-token latency, one point per level.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/json.h"
#include "serve/engine_thread.h"
#include "serve/serving_bench.h"

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

struct SweepParams {
  std::vector<int> levels = {1, 2, 4, 8, 16};  // concurrency levels, each 1..64
  int input_len = 64, output_len = 32;          // tokens per request
  int token_lo = 100, token_hi = 20000;         // prompt ids from [lo, hi): within the model's vocabulary
};

// The serving benchmark (serve/serving_bench.h, `kvad bench serve`'s) swept over concurrency
// levels against this server, in the background; the page polls status() and draws throughput
// against TTFT and ITL, one point per level.
class ServingSweep {
 public:
  ~ServingSweep();
  void set_target(const std::string& host, int port, const std::string& api_key);
  // Starts a sweep; throws HttpError(409) if one is running.
  void start(const SweepParams& p);
  Json status() const;  // the levels finished so far (ServingBenchResult::to_json each), progress
  void cancel() { cancel_ = true; }

 private:
  void run();
  std::string host_, key_;
  int port_ = 0;
  SweepParams p_;
  mutable std::mutex mu_;
  Json results_ = Json::array();
  int level_ = 0, done_ = 0;
  std::string error_;
  std::thread thread_;
  std::atomic<bool> running_{false}, cancel_{false};
  std::chrono::steady_clock::time_point t0_;
  double elapsed_ = 0;
};

}  // namespace kvad::serve
