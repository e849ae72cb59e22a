// Pulling a model from the Hugging Face Hub for the Models page: a `kvad pull ORG/NAME[@REV]`
// child process (the Hub client, src/io/hub.h), one at a time, its output kept for the page. The
// model lands in the shared HF cache, where the catalog lists it and load_model finds it by name.
#pragma once
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/json.h"
#include "serve/child.h"

namespace kvad::serve {

class PullJobs {
 public:
  explicit PullJobs(std::string exe) : exe_(std::move(exe)) {}
  ~PullJobs();
  Json start(const std::string& name);  // throws HttpError: 400 not ORG/NAME, 409 one running
  Json status() const;
  void cancel();
  // `kvad rm -y NAME` (a Hub model), waited for; throws HttpError with its message on failure.
  void remove(const std::string& name);

 private:
  std::string exe_;
  mutable std::mutex mu_;
  std::string name_, state_ = "idle";  // idle | running | finished | failed | cancelled
  std::deque<std::string> log_;
  pid_t pid_ = -1;
  int exit_code_ = -1;
  bool cancel_requested_ = false;
  std::thread thread_;
};

}  // namespace kvad::serve
