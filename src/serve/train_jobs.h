// Training jobs for the web UI's Training page. A job is a `kvad train` child process (so a crash or
// an out-of-memory kill in training never takes the server down, and cancel is a signal).
//
// NOT YET AVAILABLE: the training stack (src/train, `kvad train`) is being built in its own issue.
// Until it lands, available() is false, the page says so, and start() refuses with 501 -- nothing
// here pretends to train.
#pragma once
#include <string>

#include "core/json.h"
#include "serve/server.h"

namespace kvad::serve {

class TrainJobs {
 public:
  explicit TrainJobs(const ServeOptions& opts) : exe_(opts.self_exe) {}
  bool available() const { return false; }
  std::string why_unavailable() const {
    return "training from the web UI needs `kvad train`, which is not built yet (the training stack is its own issue)";
  }
  Json status() const { return {{"available", available()}, {"reason", why_unavailable()}, {"jobs", Json::array()}}; }
  void cancel_all() {}

 private:
  std::string exe_;
};

}  // namespace kvad::serve
