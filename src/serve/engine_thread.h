// The engine thread: one thread owns the loaded model and the runtime Engine over it (continuous
// batching, the paged KV pool). HTTP threads hand it two kinds of work:
//   - generations (GenJob): admitted while fewer than parallel + queue are in flight; the runtime
//     engine runs up to --parallel of them together, one forward per step, the rest wait in its
//     queue. Past that bound, an honest 429 with Retry-After.
//   - exclusive jobs (scoring, benchmarks, loading a model): run on the engine thread between two
//     steps, while the sequences wait.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/engine.h"
#include "runtime/loader.h"

namespace kvad::serve {

struct EngineConfig {
  int64_t ctx = 0;            // 0 = the model's own context; otherwise at most this many positions
  LoadOptions load;           // weight format in memory (--quant)
  int parallel = 4;           // sequences decoding at once (--parallel)
  int queue = 64;             // generations waiting beyond those (--queue); 429 past it
  size_t kv_bytes = 0;        // KV pool budget (--kv-memory); 0 = ctx x parallel
  int64_t block_size = 16;    // positions per KV block
  int64_t step_tokens = 256;  // rows per step (decodes + prefill chunks)
  int max_choices = 8;        // cap on n
  kernels::KvType kv_type = kernels::KvType::F32;  // what the KV cache stores (--kv-type)
  std::string device = "cpu";                       // --device
  size_t device_memory = 0;                         // --gpu-memory (EngineOptions::device_memory)
  int64_t snapshot_every = -1, snapshots = -1;     // recurrent state snapshots (--snapshot-every, --snapshots)
  SpeculativeConfig speculative;  // --draft / --spec: every generation speculates when set
  std::vector<std::string> loras;  // --lora PATH[:SCALE]: adapters of the model loaded at start
};

// How far the model being loaded has got: written on the engine thread as a load reads the
// checkpoint and as the engine copies the weights to a GPU, read by HTTP threads (the Models
// page shows it: a first q8 load of a 7B model quantises for minutes).
class LoadProgress {
 public:
  struct State {
    std::string name;   // the model asked for; "" when none is loading
    std::string stage;  // "reading the checkpoint" (quantising to q8), "copying the weights to the GPU"
    int64_t done = 0, total = 0;
    std::string unit;  // what done and total count: tensors, matrices
  };
  void start(const std::string& name);
  void update(const std::string& stage, const char* unit, int64_t done, int64_t total);
  void finish();
  State state() const;
  // Finishes when it goes out of scope: a load that failed leaves no progress behind.
  struct Scope {
    LoadProgress& progress;
    ~Scope() { progress.finish(); }
  };

 private:
  mutable std::mutex mu_;
  State s_;
};

// What the engine thread owns: the loaded model and the runtime engine over it. Only code on the
// engine thread (jobs) touches it.
class ModelHost {
 public:
  ModelHost(EngineConfig cfg, LoadProgress& progress) : cfg_(std::move(cfg)), progress_(progress) {}
  const EngineConfig& config() const { return cfg_; }
  std::shared_ptr<const LoadedModel> model() const { return model_; }
  // Loads a model with --quant's format, its progress in load_progress() (not yet served: pass it
  // to set_model).
  LoadedModel load(const std::string& name);
  // Replaces the model: every sequence of the old one is cancelled first.
  void set_model(std::shared_ptr<const LoadedModel> m);
  // The runtime engine (null when no model is loaded).
  Engine* engine() { return engine_.get(); }
  const Engine* engine() const { return engine_.get(); }
  int64_t context_length() const { return engine_ ? engine_->context_length() : 0; }
  // The loaded model's speculation (off when none was asked for, or when the draft does not fit
  // this model: speculative_error() says why).
  const SpeculativeOptions& speculative() const { return speculative_; }
  const std::string& speculative_error() const { return speculative_error_; }

 private:
  EngineConfig cfg_;
  LoadProgress& progress_;
  std::shared_ptr<const LoadedModel> model_;
  SpeculativeOptions speculative_;  // before engine_: a draft's engine outlives no target engine
  std::string speculative_error_;
  std::unique_ptr<Engine> engine_;
};

class Job {
 public:
  virtual ~Job() = default;
  virtual const char* kind() const = 0;
  // On the engine thread. Exceptions are caught and passed to fail().
  virtual void run(ModelHost& host) = 0;
  virtual void publish() {}
  virtual void fail(const std::string& message, int status) {}
  // Asks a running job to stop as soon as it can (disconnect, shutdown).
  virtual void cancel() {}
};

class GenJob;

// Figures the dashboard and /metrics read without stopping the engine (updated after every step).
struct LiveStats {
  std::atomic<size_t> kv_bytes{0}, kv_bytes_per_token{0}, kv_capacity_bytes{0}, weight_bytes{0};
  std::atomic<int64_t> tokens_held{0}, context_length{0};
  std::atomic<int64_t> blocks_total{0}, blocks_used{0}, blocks_cached{0}, blocks_free{0}, block_size{0};
  std::atomic<int64_t> running{0}, waiting{0}, last_step_rows{0};
  std::atomic<uint64_t> steps{0}, preemptions{0};
  std::atomic<int64_t> draft_tokens{0}, draft_accepted{0};  // speculative decoding, since start
  // Recurrent models: one sequence's state, slots in use, snapshots kept and their spacing.
  std::atomic<size_t> state_bytes{0};
  std::atomic<int64_t> states_used{0}, snapshots_held{0}, snapshot_every{0};
  std::atomic<int64_t> last_prompt_tokens{0}, last_cached_tokens{0}, last_completion_tokens{0};
  std::atomic<double> last_prefill_tok_s{0}, last_decode_tok_s{0}, last_ttft_s{0};
  std::atomic<uint64_t> jobs_run{0};
};

class EngineThread {
 public:
  enum class Admit { Ok, Busy, ShuttingDown };
  explicit EngineThread(EngineConfig cfg);
  ~EngineThread();
  EngineThread(const EngineThread&) = delete;
  EngineThread& operator=(const EngineThread&) = delete;

  // Admits the job or refuses it at once; never blocks on the engine.
  Admit submit(std::shared_ptr<Job> job);
  Admit submit(std::shared_ptr<GenJob> gen);
  // Loads a model before serving starts (on the calling thread; the engine is idle).
  void load_now(const std::string& name, const std::string& alias = "");

  std::shared_ptr<const LoadedModel> model() const;
  const EngineConfig& config() const { return cfg_; }
  LoadProgress::State load_progress() const { return load_progress_.state(); }
  LiveStats& stats() { return stats_; }
  // The engine's running sequences as of its last step (copied for the caller).
  std::vector<SequenceStatus> sequences() const;
  int in_flight() const;             // generations admitted and not finished + exclusive jobs
  int queued() const;                // exclusive jobs waiting + generations waiting for a slot
  std::string running_kind() const;  // the exclusive job running, "" when none
  double busy_seconds() const;       // how long it has been running
  // Refuses new work; lets running generations finish for up to `grace` seconds, then cancels
  // them; returns when the engine is idle. Safe to call twice.
  void shutdown(double grace_seconds);
  bool shutting_down() const { return stopping_.load(); }

  // Called on the engine thread after each change of model or step.
  void refresh_stats();
  void set_model(std::shared_ptr<const LoadedModel> m);  // on the engine thread (a load job)
  void generation_finished();                            // a GenJob's sequence ended (engine thread)

 private:
  void loop();
  void run_job(const std::shared_ptr<Job>& job);
  void start_generation(const std::shared_ptr<GenJob>& g);
  EngineConfig cfg_;
  LoadProgress load_progress_;  // before host_, which writes to it
  ModelHost host_;
  LiveStats stats_;
  mutable std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<std::shared_ptr<Job>> jobs_;
  std::deque<std::shared_ptr<GenJob>> incoming_;  // admitted, not yet handed to the engine
  int generations_ = 0;                           // admitted and not finished
  std::shared_ptr<Job> running_;
  std::chrono::steady_clock::time_point running_since_;
  std::shared_ptr<const LoadedModel> model_;  // snapshot for other threads (guarded by mu_)
  std::vector<SequenceStatus> sequences_;     // likewise; capacity reserved, so a step does not allocate
  std::atomic<bool> stopping_{false};
  std::atomic<bool> cancel_all_{false};
  bool exit_ = false;
  std::thread thread_;
};

// The name clients use for a loaded model: its --alias, else model_own_id.
std::string model_id(const LoadedModel& m);
// Its store name, or its folder's last component (a request may name it even under an alias).
std::string model_own_id(const LoadedModel& m);

}  // namespace kvad::serve
