// A generation request as a scheduler Job: the engine thread runs generate() over the best session
// (prefix reuse) and pushes each token into a channel; the HTTP thread that owns the client
// connection pops them and writes them out. A failed write (the client went away) cancels the job,
// and the engine stops at the next token.
#pragma once
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>

#include "serve/openai.h"
#include "serve/scheduler.h"

namespace kvad::serve {

struct GenEvent {
  enum Kind { Token, Done, Failed } kind = Token;
  TokenOut tok;
  GenerateResult result;  // Done
  double ttft_seconds = 0;
  std::string error;      // Failed
  int status = 500;
};

class GenJob final : public Job {
 public:
  GenJob(Scheduler& sched, std::shared_ptr<const LoadedModel> model, std::vector<int32_t> prompt, GenerateOptions opts)
      : sched_(sched), model_(std::move(model)), prompt_(std::move(prompt)), opts_(std::move(opts)) {}
  const char* kind() const override { return "generate"; }
  void run(Engine& e) override;
  void publish() override;
  void fail(const std::string& message, int status) override;
  void cancel() override { cancelled_ = true; }
  bool cancelled() const { return cancelled_.load(); }

  // Consumer side: waits up to `timeout` for the next event; false on timeout.
  bool next(GenEvent& out, std::chrono::milliseconds timeout);
  // Everything that is ready now (at least one event unless it times out).
  bool next_batch(std::vector<GenEvent>& out, std::chrono::milliseconds timeout);

 private:
  void push(GenEvent ev);
  Scheduler& sched_;
  std::shared_ptr<const LoadedModel> model_;
  std::vector<int32_t> prompt_;
  GenerateOptions opts_;
  std::atomic<bool> cancelled_{false};
  GenerateResult result_;
  double ttft_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<GenEvent> q_;
};

}  // namespace kvad::serve
