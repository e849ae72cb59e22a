// Training jobs for the web UI's Training page. A job is a `kvad train` child process of this same
// binary, so training never shares the engine's thread pool, a crash or out-of-memory kill in
// training never takes the server down, and cancel is SIGINT (kvad train then saves a checkpoint
// and exits 130). Its output is read line by line: the progress lines ("step N/T  loss X ...") make
// the loss curve, "step N: val loss ..." the validation points, "--- sample at step N ---" blocks
// the samples, and the last line is the JSON summary. The model lands in kvad's store, so the
// Models page lists it.
//
// A LoRA job ({"kind": "lora"}) fine-tunes an adapter for a base the Models page lists (`kvad train
// --lora --base ...`): its output has the base's own validation point first ("step 0 (the base):
// ..."), and the adapter lands in the store's adapters/. When it finishes, the server adds it to
// its adapters if that base is loaded (LoraHooks::attach); the job's "adapter" says what became of it.
#pragma once
#include <sys/types.h>

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/json.h"
#include "serve/child.h"
#include "serve/server.h"

namespace kvad::serve {

class TrainJobs {
 public:
  explicit TrainJobs(const ServeOptions& opts);
  ~TrainJobs();
  // What a LoRA job needs of the server (set once, before serving).
  struct LoraHooks {
    // The folder of the base the Models page lists by this name; throws HttpError naming 'base'.
    std::function<std::string(const std::string& name)> base_path;
    // After a job saved adapter `name` in `dir`: {"loaded", "id"?, "message"}.
    std::function<Json(const std::string& name, const std::string& dir, const std::string& base,
                       const std::string& base_path)>
        attach;
  };
  void set_lora_hooks(LoraHooks h) { hooks_ = std::move(h); }
  bool available() const { return !exe_.empty(); }
  std::string why_unavailable() const { return "the kvad binary could not be located (/proc/self/exe)"; }
  // Starts a job from the page's form: {name, text, size: tiny|small|medium, steps, arch, replace},
  // or {kind: "lora", name, base, text (plain text or chat JSONL), rank, alpha, steps, batch,
  // context, replace}. Throws HttpError (400 bad field, 404 unknown base, 409 one is running).
  Json start(const Json& body);
  // {available, jobs: [summaries], current: details of the newest job}.
  Json status() const;
  void cancel(int64_t id);  // SIGINT: kvad train saves and exits
  void cancel_all();

 private:
  struct Job {
    int64_t id = 0;
    std::string kind = "model";  // model | lora
    std::string name, data_path;
    std::string base, base_path;  // a LoRA job's base: its name on the Models page, its folder
    Json adapter;                 // a finished LoRA job's adapter: {"loaded", "id"?, "message"}
    Json params;
    pid_t pid = -1;
    std::string state = "running";  // running | finished | cancelled | failed
    int exit_code = -1;
    double started = 0, ended = 0;
    int64_t total_steps = 0;
    std::vector<std::pair<int64_t, double>> loss;                  // (step, train loss)
    std::vector<std::tuple<int64_t, double, double>> val;         // (step, val loss, bits/char)
    std::vector<std::pair<int64_t, std::string>> samples;         // (step, text)
    std::deque<std::string> log;                                   // last lines of output
    Json summary;
    bool cancel_requested = false;
    std::thread watcher;
  };
  // What start() launches: the job (name, kind, params, base), the upload and `kvad train`'s arguments
  // after --data.
  struct Plan {
    std::shared_ptr<Job> job = std::make_shared<Job>();
    std::string text, ext = ".txt";
    std::vector<std::string> args;
  };
  Plan model_plan(const Json& b) const;
  Plan lora_plan(const Json& b) const;
  Json launch(Plan p);
  void watch(std::shared_ptr<Job> job, Child c);
  void on_line(Job& job, const std::string& line, bool from_stdout, std::string& sample, int64_t& sample_step);
  Json job_json(const Job& j, bool details) const;

  std::string exe_, uploads_;
  LoraHooks hooks_;
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<Job>> jobs_;
  int64_t next_id_ = 1;
};

}  // namespace kvad::serve
