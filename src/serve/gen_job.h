// A generation request on its way through the engine thread: the HTTP thread that owns the client
// connection builds it and waits on its channel; the engine thread turns it into a sequence of the
// runtime engine, whose callbacks push each token (and the end) into the channel. A failed write
// (the client went away) cancels it, and the engine drops the sequence at the next step.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>

#include "serve/engine_thread.h"
#include "serve/openai.h"

namespace kvad::serve {

struct GenEvent {
  enum Kind { Token, Done, Failed } kind = Token;
  int32_t choice = 0;  // of the request's n
  TokenOut tok;
  GenerateResult result;  // Done
  double ttft_seconds = 0;
  std::string error;      // Failed
  int status = 500;
};

class GenJob : public std::enable_shared_from_this<GenJob> {
 public:
  GenJob(std::shared_ptr<const LoadedModel> model, std::vector<int32_t> prompt, GenerateOptions opts, uint64_t cache_salt,
         int64_t n = 1)
      : model_(std::move(model)), prompt_(std::move(prompt)), opts_(std::move(opts)), salt_(cache_salt), n_(n),
        t0_(std::chrono::steady_clock::now()) {}
  const std::shared_ptr<const LoadedModel>& model() const { return model_; }
  // The adapters the sequence runs with (they live in model_, which the job holds).
  void set_loras(std::vector<LoraUse> loras) { loras_ = std::move(loras); }
  int64_t choices() const { return n_; }
  // On the engine thread: the sequence for the runtime engine, with callbacks into this job (they
  // hold it alive until the sequence ends).
  GenerationRequest request(EngineThread& thread);
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_.load(); }
  void fail(const std::string& message, int status);

  // Consumer side: waits up to `timeout` for the next event; false on timeout.
  bool next(GenEvent& out, std::chrono::milliseconds timeout);
  // Everything that is ready now (at least one event unless it times out).
  bool next_batch(std::vector<GenEvent>& out, std::chrono::milliseconds timeout);

 private:
  void push(GenEvent ev);
  std::shared_ptr<const LoadedModel> model_;
  std::vector<int32_t> prompt_;
  GenerateOptions opts_;
  uint64_t salt_;
  std::vector<LoraUse> loras_;
  int64_t n_, ended_ = 0;  // choices, and how many have ended (engine thread)
  std::chrono::steady_clock::time_point t0_;
  double ttft_ = 0;
  bool first_ = true;
  std::atomic<bool> cancelled_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<GenEvent> q_;
};

}  // namespace kvad::serve
