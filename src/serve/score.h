// Scoring a text with the loaded model: perplexity, bits per character and per byte, as an
// exclusive engine job over runtime/score.h (the same definition `kvad score` prints).
#pragma once
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>

#include "core/json.h"
#include "serve/engine_thread.h"

namespace kvad::serve {

class ScoreJob final : public Job {
 public:
  ScoreJob(std::string text, int64_t window) : text_(std::move(text)), window_(window) {}
  const char* kind() const override { return "scoring"; }
  void run(ModelHost& e) override;
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
