// Scoring a text with the loaded model: perplexity, bits per character and per byte. An engine job
// that runs the model over the text in context-sized windows (each overlapping the previous by one
// token, so every token after the first is predicted exactly once) and reads all positions' logits.
#pragma once
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>

#include "core/json.h"
#include "serve/scheduler.h"

namespace kvad::serve {

class ScoreJob final : public Job {
 public:
  ScoreJob(std::string text, int64_t window) : text_(std::move(text)), window_(window) {}
  const char* kind() const override { return "scoring"; }
  void run(Engine& e) override;
  void publish() override;
  void fail(const std::string& message, int status) override;
  void cancel() override { cancelled_ = true; }
  Json wait();  // the result, or throws HttpError

 private:
  std::string text_;
  int64_t window_;
  std::atomic<bool> cancelled_{false};
  Json result_;
  std::string error_;
  int status_ = 500;
  bool done_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
};

}  // namespace kvad::serve
