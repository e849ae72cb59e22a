// The scheduler: one engine thread owns the model and its Sessions; every request that needs the
// model (generation, scoring, benchmarks, loading another model) is a Job submitted here.
//
// Admission is the seam continuous batching will fill. Today the engine runs one sequence at a time,
// so the scheduler admits at most `capacity` (1) job in flight and refuses the next one at once
// (the caller answers 429 + Retry-After) rather than queuing it silently behind a long answer.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/generate.h"
#include "runtime/loader.h"
#include "runtime/session.h"

namespace kvad::serve {

struct EngineConfig {
  int64_t ctx = 0;            // 0 = the model's own context; otherwise at most this many positions
  LoadOptions load;           // weight format in memory (--quant)
  int sessions = 4;           // conversations whose KV cache is kept for prefix reuse
  int capacity = 1;           // jobs in flight at once (1 until batching exists)
};

// What the engine thread owns. Only jobs (running on that thread) touch it.
class Engine {
 public:
  explicit Engine(EngineConfig cfg) : cfg_(std::move(cfg)) {}
  const EngineConfig& config() const { return cfg_; }
  std::shared_ptr<const LoadedModel> model() const { return model_; }
  void set_model(std::shared_ptr<const LoadedModel> m);
  // The session holding the longest prefix of `prompt` (or the least recently used one, emptied).
  Session& session_for(const std::vector<int32_t>& prompt);
  int64_t context_length() const;  // of the loaded model, after --ctx
  size_t kv_bytes() const;         // held by all sessions now
  size_t kv_bytes_per_token() const;
  int64_t tokens_held() const;     // positions held by all sessions

 private:
  struct Slot {
    std::unique_ptr<Session> session;
    uint64_t last_used = 0;
    size_t prompt_len = 0;  // of the last request it served
  };
  EngineConfig cfg_;
  std::shared_ptr<const LoadedModel> model_;
  std::vector<Slot> slots_;
  uint64_t clock_ = 0;
};

class Job {
 public:
  virtual ~Job() = default;
  virtual const char* kind() const = 0;
  // On the engine thread. Exceptions are caught by the scheduler and passed to fail().
  virtual void run(Engine& e) = 0;
  // After run() and after the slot was released (so a client that hears "done" can send the next
  // request at once without meeting a 429 from its own previous one).
  virtual void publish() {}
  virtual void fail(const std::string& message, int status) {}
  // Asks a running job to stop as soon as it can (disconnect, shutdown).
  virtual void cancel() {}
};

// Engine-side figures the dashboard and /metrics read without stopping the engine.
struct EngineStats {
  std::atomic<size_t> kv_bytes{0}, kv_bytes_per_token{0}, weight_bytes{0};
  std::atomic<int64_t> tokens_held{0}, context_length{0};
  std::atomic<int64_t> last_prompt_tokens{0}, last_cached_tokens{0}, last_completion_tokens{0};
  std::atomic<double> last_prefill_tok_s{0}, last_decode_tok_s{0}, last_ttft_s{0};
  std::atomic<uint64_t> jobs_run{0};
};

class Scheduler {
 public:
  enum class Admit { Ok, Busy, ShuttingDown };
  explicit Scheduler(EngineConfig cfg);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Admits the job or refuses it at once; never blocks on the engine.
  Admit submit(std::shared_ptr<Job> job);
  // Loads a model before serving starts (on the calling thread; the engine is idle).
  void load_now(const std::string& name);

  std::shared_ptr<const LoadedModel> model() const;
  const EngineConfig& config() const { return cfg_; }
  EngineStats& stats() { return stats_; }
  int in_flight() const;       // running + queued
  int queued() const;          // admitted, not started
  std::string running_kind() const;  // "" when idle
  double busy_seconds() const; // how long the running job has been running
  // Refuses new jobs; lets the running one finish for up to `grace` seconds, then cancels it;
  // returns when the engine is idle. Safe to call twice.
  void shutdown(double grace_seconds);
  bool shutting_down() const { return stopping_.load(); }

  // Called by jobs on the engine thread after each change of sessions/model.
  void refresh_stats(const Engine& e);

 private:
  void loop();
  EngineConfig cfg_;
  Engine engine_;
  EngineStats stats_;
  mutable std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::shared_ptr<Job> running_;
  std::chrono::steady_clock::time_point running_since_;
  std::shared_ptr<const LoadedModel> model_;  // snapshot for other threads (guarded by mu_)
  std::atomic<bool> stopping_{false};
  bool exit_ = false;
  std::thread thread_;
  friend class ModelSwap;
  friend void set_scheduler_model(Scheduler& s, Engine& e, std::shared_ptr<const LoadedModel> m);
};

// Replaces the loaded model (on the engine thread, inside a job).
void set_scheduler_model(Scheduler& s, Engine& e, std::shared_ptr<const LoadedModel> m);

// The name clients use for a loaded model: its store name, or its folder's last component.
std::string model_id(const LoadedModel& m);

}  // namespace kvad::serve
