// An exclusive engine job whose body is a function, and the HTTP thread's wait for its JSON result
// (the UI's model routes, embeddings). Internal to src/serve.
#pragma once
#include <condition_variable>
#include <functional>
#include <mutex>

#include "serve/server_impl.h"

namespace kvad::serve {

// A job whose body is a function; the HTTP thread waits for its JSON result.
class FnJob final : public Job {
 public:
  FnJob(const char* kind, std::function<Json(ModelHost&)> fn) : kind_(kind), fn_(std::move(fn)) {}
  const char* kind() const override { return kind_; }
  void run(ModelHost& e) override { result_ = fn_(e); }
  void publish() override { finish("", 200); }
  void fail(const std::string& m, int status) override { finish(m, status); }
  Json wait() {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return done_; });
    if (!error_.empty()) throw HttpError(status_, error_, status_ >= 500 ? "server_error" : "invalid_request_error");
    return result_;
  }

 private:
  void finish(const std::string& m, int status) {
    std::lock_guard<std::mutex> lk(mu_);
    error_ = m;
    status_ = status;
    done_ = true;
    cv_.notify_all();
  }
  const char* kind_;
  std::function<Json(ModelHost&)> fn_;
  Json result_;
  std::string error_;
  int status_ = 200;
  bool done_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
};

// Submits the job (429 / 503 when refused) and waits for its result.
template <typename J>
Json run_and_wait(Server::Impl& s, std::shared_ptr<J> job) {
  EngineThread::Admit a = s.sched.submit(job);
  if (a != EngineThread::Admit::Ok) throw refusal(s, a);
  return job->wait();
}

}  // namespace kvad::serve
