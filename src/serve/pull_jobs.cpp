#include "serve/pull_jobs.h"

#include <signal.h>

#include "io/hf_cache.h"
#include "serve/openai.h"

namespace kvad::serve {

PullJobs::~PullJobs() {
  cancel();
  if (thread_.joinable()) thread_.join();
}

Json PullJobs::start(const std::string& name) {
  if (!hf::looks_like_repo_ref(name))
    throw HttpError(400, fmt::format("'{}' is not a Hub model: give ORG/NAME, ORG/NAME@REVISION or ORG/NAME:FILE", name),
                    "invalid_request_error", "name");
  std::lock_guard<std::mutex> lk(mu_);
  if (state_ == "running")
    throw HttpError(409, fmt::format("already pulling '{}'", name_), "invalid_request_error", "name");
  if (thread_.joinable()) thread_.join();
  Child c;
  try {
    c = spawn_child({exe_, "pull", name});
  } catch (const Error& e) {
    throw HttpError(500, e.what(), "server_error");
  }
  name_ = name;
  state_ = "running";
  log_.clear();
  pid_ = c.pid;
  exit_code_ = -1;
  cancel_requested_ = false;
  thread_ = std::thread([this, c]() mutable {
    int code = drain_child(c, [&](const std::string& line, bool) {
      if (line.empty()) return;
      std::lock_guard<std::mutex> lk(mu_);
      log_.push_back(line);
      while (log_.size() > 40) log_.pop_front();
    });
    std::lock_guard<std::mutex> lk(mu_);
    exit_code_ = code;
    state_ = code == 0 ? "finished" : cancel_requested_ ? "cancelled" : "failed";
    pid_ = -1;
  });
  return {{"name", name_}, {"state", state_}};
}

Json PullJobs::status() const {
  std::lock_guard<std::mutex> lk(mu_);
  Json log = Json::array();
  for (const std::string& l : log_) log.push_back(l);
  return {{"name", name_}, {"state", state_}, {"exit_code", exit_code_}, {"log", log}};
}

void PullJobs::cancel() {
  std::lock_guard<std::mutex> lk(mu_);
  if (state_ == "running" && pid_ > 0) {
    cancel_requested_ = true;
    kill(pid_, SIGINT);
  }
}

void PullJobs::remove(const std::string& name) {
  Child c;
  try {
    c = spawn_child({exe_, "rm", "-y", name});
  } catch (const Error& e) {
    throw HttpError(500, e.what(), "server_error");
  }
  std::string out;
  int code = drain_child(c, [&](const std::string& line, bool) {
    if (!line.empty()) out += (out.empty() ? "" : "; ") + line;
  });
  if (code != 0) throw HttpError(400, out.empty() ? fmt::format("kvad rm {} failed ({})", name, code) : out,
                                 "invalid_request_error", "name");
}

}  // namespace kvad::serve
