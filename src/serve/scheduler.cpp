#include "serve/scheduler.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "serve/openai.h"

namespace kvad::serve {

namespace {

// A Session whose context is capped by --ctx (the cap is what generation and errors see).
class CappedSession final : public Session {
 public:
  CappedSession(std::unique_ptr<Session> inner, int64_t cap) : s_(std::move(inner)), cap_(cap) {}
  const std::vector<float>& forward(const std::vector<int32_t>& t) override {
    if (s_->cached() + (int64_t)t.size() > context_length())
      fail("context full: {} tokens held + {} new exceeds the context of {} tokens", s_->cached(), t.size(),
           context_length());
    return s_->forward(t);
  }
  int64_t cached() const override { return s_->cached(); }
  int64_t truncate(int64_t n) override { return s_->truncate(n); }
  const std::vector<int32_t>& tokens() const override { return s_->tokens(); }
  int64_t context_length() const override { return cap_ > 0 ? std::min(cap_, s_->context_length()) : s_->context_length(); }
  int64_t vocab_size() const override { return s_->vocab_size(); }
  size_t kv_bytes() const override { return s_->kv_bytes(); }
  size_t kv_bytes_per_token() const override { return s_->kv_bytes_per_token(); }

 private:
  std::unique_ptr<Session> s_;
  int64_t cap_;
};

}  // namespace

std::string model_id(const LoadedModel& m) {
  std::string n = m.name;
  while (n.size() > 1 && n.back() == '/') n.pop_back();
  size_t slash = n.rfind('/');
  return slash == std::string::npos ? n : n.substr(slash + 1);
}

void Engine::set_model(std::shared_ptr<const LoadedModel> m) {
  slots_.clear();  // sessions refer to the old model
  model_ = std::move(m);
}

Session& Engine::session_for(const std::vector<int32_t>& prompt) {
  if (!model_) throw HttpError(404, "no model is loaded", "invalid_request_error", "model", "model_not_found");
  clock_++;
  Slot* best = nullptr;
  size_t best_common = 0;
  for (Slot& s : slots_) {
    const std::vector<int32_t>& held = s.session->tokens();
    size_t c = 0;
    while (c < held.size() && c < prompt.size() && held[c] == prompt[c]) c++;
    if (c > best_common) best = &s, best_common = c;
  }
  // Another conversation that merely shares a system prompt keeps its cache while a slot is free:
  // a session is reused when the new prompt repeats at least half of the last prompt it was given
  // (the next turn of a conversation repeats all of it; the generated tail may re-tokenize
  // differently, so it does not count).
  bool free_slot = (int)slots_.size() < std::max(1, cfg_.sessions);
  if (best && free_slot && best_common * 2 < best->prompt_len) best = nullptr;
  if (!best) {
    if (free_slot) {
      slots_.push_back({std::make_unique<CappedSession>(make_cpu_session(*model_->model), cfg_.ctx), 0, 0});
      best = &slots_.back();
    } else {
      best = &*std::min_element(slots_.begin(), slots_.end(),
                                [](const Slot& a, const Slot& b) { return a.last_used < b.last_used; });
    }
  }
  best->last_used = clock_;
  best->prompt_len = prompt.size();
  return *best->session;
}

int64_t Engine::context_length() const {
  if (!model_) return 0;
  int64_t c = model_->model->context_length();
  return cfg_.ctx > 0 ? std::min(cfg_.ctx, c) : c;
}

size_t Engine::kv_bytes() const {
  size_t b = 0;
  for (const Slot& s : slots_) b += s.session->kv_bytes();
  return b;
}

size_t Engine::kv_bytes_per_token() const {
  if (!slots_.empty()) return slots_[0].session->kv_bytes_per_token();
  if (!model_) return 0;
  auto st = model_->model->new_state();
  return st->bytes_per_token();
}

int64_t Engine::tokens_held() const {
  int64_t n = 0;
  for (const Slot& s : slots_) n += s.session->cached();
  return n;
}

Scheduler::Scheduler(EngineConfig cfg) : cfg_(cfg), engine_(cfg) {
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() {
  shutdown(0);
  {
    std::lock_guard<std::mutex> lk(mu_);
    exit_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Scheduler::Admit Scheduler::submit(std::shared_ptr<Job> job) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stopping_) return Admit::ShuttingDown;
    int inflight = (int)queue_.size() + (running_ ? 1 : 0);
    if (inflight >= std::max(1, cfg_.capacity)) return Admit::Busy;
    queue_.push_back(std::move(job));
  }
  cv_.notify_all();
  return Admit::Ok;
}

void Scheduler::load_now(const std::string& name) {
  auto m = std::make_shared<LoadedModel>(load_model(name, cfg_.load));
  std::lock_guard<std::mutex> lk(mu_);
  if (running_ || !queue_.empty()) fail("load_now: the engine is busy");
  engine_.set_model(m);
  model_ = m;
  stats_.weight_bytes = m->model->weight_bytes();
  stats_.context_length = engine_.context_length();
  stats_.kv_bytes_per_token = engine_.kv_bytes_per_token();
  stats_.kv_bytes = 0;
  stats_.tokens_held = 0;
}

void set_scheduler_model(Scheduler& s, Engine& e, std::shared_ptr<const LoadedModel> m) {
  e.set_model(m);
  {
    std::lock_guard<std::mutex> lk(s.mu_);
    s.model_ = m;
  }
  s.refresh_stats(e);
}

void Scheduler::refresh_stats(const Engine& e) {
  auto m = e.model();
  stats_.weight_bytes = m ? m->model->weight_bytes() : 0;
  stats_.context_length = e.context_length();
  stats_.kv_bytes = e.kv_bytes();
  stats_.kv_bytes_per_token = e.kv_bytes_per_token();
  stats_.tokens_held = e.tokens_held();
}

std::shared_ptr<const LoadedModel> Scheduler::model() const {
  std::lock_guard<std::mutex> lk(mu_);
  return model_;
}

int Scheduler::in_flight() const {
  std::lock_guard<std::mutex> lk(mu_);
  return (int)queue_.size() + (running_ ? 1 : 0);
}

int Scheduler::queued() const {
  std::lock_guard<std::mutex> lk(mu_);
  return (int)queue_.size();
}

std::string Scheduler::running_kind() const {
  std::lock_guard<std::mutex> lk(mu_);
  return running_ ? running_->kind() : "";
}

double Scheduler::busy_seconds() const {
  std::lock_guard<std::mutex> lk(mu_);
  if (!running_) return 0;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - running_since_).count();
}

void Scheduler::loop() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return exit_ || !queue_.empty(); });
      if (queue_.empty()) return;
      job = queue_.front();
      queue_.pop_front();
      running_ = job;
      running_since_ = std::chrono::steady_clock::now();
    }
    std::string error;
    int status = 500;
    try {
      job->run(engine_);
    } catch (const HttpError& e) {
      error = e.what();
      status = e.status;
    } catch (const Error& e) {
      error = e.what();
      status = 400;
    } catch (const std::bad_alloc&) {
      error = "out of memory";
    } catch (const std::exception& e) {
      error = std::string("internal error: ") + e.what();
    }
    refresh_stats(engine_);
    stats_.jobs_run++;
    {
      std::lock_guard<std::mutex> lk(mu_);
      running_.reset();
    }
    idle_cv_.notify_all();
    if (error.empty()) job->publish();
    else job->fail(error, status);
  }
}

void Scheduler::shutdown(double grace) {
  std::unique_lock<std::mutex> lk(mu_);
  stopping_ = true;
  for (auto& j : queue_) j->cancel();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace);
  if (!idle_cv_.wait_until(lk, deadline, [&] { return !running_ && queue_.empty(); })) {
    if (running_) running_->cancel();
    for (auto& j : queue_) j->cancel();
    idle_cv_.wait(lk, [&] { return !running_ && queue_.empty(); });
  }
}

}  // namespace kvad::serve
