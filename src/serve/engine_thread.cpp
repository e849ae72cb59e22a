#include "serve/engine_thread.h"

#include "runtime/devices.h"

#include "serve/lora_adapters.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "serve/gen_job.h"
#include "serve/openai.h"

namespace kvad::serve {

std::string model_own_id(const LoadedModel& m) {
  std::string n = m.name;
  while (n.size() > 1 && n.back() == '/') n.pop_back();
  size_t slash = n.rfind('/');
  return slash == std::string::npos ? n : n.substr(slash + 1);
}

std::string model_id(const LoadedModel& m) { return m.served_as.empty() ? model_own_id(m) : m.served_as; }

void LoadProgress::start(const std::string& name) {
  std::lock_guard<std::mutex> lk(mu_);
  s_ = State{name, "", 0, 0, ""};
}

void LoadProgress::update(const std::string& stage, const char* unit, int64_t done, int64_t total) {
  std::lock_guard<std::mutex> lk(mu_);
  s_.stage = stage;
  s_.unit = unit;
  s_.done = done;
  s_.total = total;
}

void LoadProgress::finish() {
  std::lock_guard<std::mutex> lk(mu_);
  s_ = State{};
}

LoadProgress::State LoadProgress::state() const {
  std::lock_guard<std::mutex> lk(mu_);
  return s_;
}

LoadedModel ModelHost::load(const std::string& name) {
  progress_.start(name);
  LoadProgress::Scope scope{progress_};
  LoadOptions lo = cfg_.load;
  const std::string stage = lo.format == WeightFormat::AsStored
                                ? std::string("reading the checkpoint")
                                : std::string("reading the checkpoint, to ") + weight_format_name(lo.format);
  lo.on_progress = [&](int64_t d, int64_t t) { progress_.update(stage, "tensors", d, t); };
  return load_model(name, lo);
}

void ModelHost::set_model(std::shared_ptr<const LoadedModel> m) {
  engine_.reset();  // cancels the old model's sequences (their clients hear "cancelled")
  speculative_ = {};
  speculative_error_.clear();
  model_ = std::move(m);
  if (!model_) return;
  EngineOptions o;
  o.ctx = cfg_.ctx;
  o.max_running = std::max(1, cfg_.parallel);
  o.kv_bytes = cfg_.kv_bytes;
  o.block_size = cfg_.block_size;
  o.step_tokens = cfg_.step_tokens;
  o.kv_type = cfg_.kv_type;
  o.device = cfg_.device;
  o.device_memory = cfg_.device_memory;
  set_gpu_weight_cache(o, *model_);
  if (is_gpu_device(cfg_.device)) {
    progress_.start(model_->name);
    o.on_weights_progress = [this](int64_t d, int64_t t) {
      progress_.update("copying the weights to the GPU", "matrices", d, t);
    };
  }
  o.snapshot_every = cfg_.snapshot_every;
  o.snapshots = cfg_.snapshots;
  LoadProgress::Scope scope{progress_};
  engine_ = std::make_unique<Engine>(*model_->model, o);
  if (!engine_->weights_note().empty()) std::fprintf(stderr, "kvad serve: %s\n", engine_->weights_note().c_str());
  // This engine is the model's only one (another model replaces it whole, loaded again).
  release_host_weights_if_on_device(*model_->model, *engine_);
  if (!cfg_.speculative.any()) return;
  try {
    std::string note;
    speculative_ = speculative_options(cfg_.speculative, *model_, engine_->context_length(), o.max_running, &note);
    if (!note.empty()) std::fprintf(stderr, "kvad: draft: %s\n", note.c_str());
  } catch (const Error& e) {  // a model loaded later from the UI may not fit the draft: serve it plainly
    speculative_error_ = e.what();
    std::fprintf(stderr, "kvad: warning: speculative decoding is off for %s: %s\n", model_->name.c_str(), e.what());
  }
}

EngineThread::EngineThread(EngineConfig cfg) : cfg_(cfg), host_(cfg, load_progress_) { thread_ = std::thread([this] { loop(); }); }

EngineThread::~EngineThread() {
  shutdown(0);
  {
    std::lock_guard<std::mutex> lk(mu_);
    exit_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

EngineThread::Admit EngineThread::submit(std::shared_ptr<Job> job) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stopping_) return Admit::ShuttingDown;
    if ((int)jobs_.size() >= std::max(1, cfg_.queue)) return Admit::Busy;
    jobs_.push_back(std::move(job));
  }
  cv_.notify_all();
  return Admit::Ok;
}

EngineThread::Admit EngineThread::submit(std::shared_ptr<GenJob> gen) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stopping_) return Admit::ShuttingDown;
    if (generations_ >= std::max(1, cfg_.parallel) + std::max(0, cfg_.queue)) return Admit::Busy;
    generations_++;
    incoming_.push_back(std::move(gen));
  }
  cv_.notify_all();
  return Admit::Ok;
}

void EngineThread::generation_finished() {
  std::lock_guard<std::mutex> lk(mu_);
  generations_--;
}

void EngineThread::load_now(const std::string& name, const std::string& alias) {
  auto m = std::make_shared<LoadedModel>(host_.load(name));
  m->served_as = alias;
  m->loras = load_loras(cfg_.loras, *m->model);
  // As a model loaded from the Models page: the store's adapters made for it join, at scale 0.
  for (LoadedLora& l : load_store_adapters(*m)) m->loras.push_back(std::move(l));
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (running_ || !jobs_.empty() || generations_ > 0) fail("load_now: the engine is busy");
    host_.set_model(m);
    // The model named at start must take the draft it was started with.
    if (!host_.speculative_error().empty()) fail("{}", host_.speculative_error());
    model_ = m;
  }
  refresh_stats();  // takes mu_ itself
}

void EngineThread::set_model(std::shared_ptr<const LoadedModel> m) {
  host_.set_model(m);
  {
    std::lock_guard<std::mutex> lk(mu_);
    model_ = m;
  }
  refresh_stats();
}

void EngineThread::refresh_stats() {
  auto m = host_.model();
  const Engine* e = host_.engine();
  stats_.weight_bytes = m ? m->model->weight_bytes() : 0;
  stats_.context_length = host_.context_length();
  if (!e) {
    stats_.kv_bytes = 0;
    stats_.tokens_held = 0;
    stats_.running = stats_.waiting = 0;
    std::lock_guard<std::mutex> lk(mu_);
    sequences_.clear();
    return;
  }
  kvad::EngineStats s = e->stats();
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (sequences_.capacity() < (size_t)s.running) sequences_.reserve((size_t)std::max<int64_t>(s.running, 2 * cfg_.parallel));
    e->sequences(sequences_);
  }
  stats_.kv_bytes = (size_t)s.blocks.used * s.bytes_per_block;
  stats_.kv_capacity_bytes = (size_t)s.blocks.total * s.bytes_per_block;
  stats_.kv_bytes_per_token = s.bytes_per_token;
  stats_.tokens_held = s.tokens_held;
  stats_.blocks_total = s.blocks.total;
  stats_.blocks_used = s.blocks.used;
  stats_.blocks_cached = s.blocks.cached;
  stats_.blocks_free = s.blocks.free;
  stats_.block_size = s.block_size;
  stats_.running = s.running;
  stats_.waiting = s.waiting;
  stats_.steps = s.steps;
  stats_.preemptions = s.preemptions;
  stats_.draft_tokens = s.draft_tokens;
  stats_.draft_accepted = s.draft_accepted;
  stats_.state_bytes = s.state_bytes;
  stats_.states_used = s.blocks.states_used;
  stats_.snapshots_held = s.blocks.snapshots_held;
  stats_.snapshot_every = s.snapshot_every;
  stats_.last_step_rows = s.last_step_rows;
}

std::vector<SequenceStatus> EngineThread::sequences() const {
  std::lock_guard<std::mutex> lk(mu_);
  return sequences_;
}

std::shared_ptr<const LoadedModel> EngineThread::model() const {
  std::lock_guard<std::mutex> lk(mu_);
  return model_;
}

int EngineThread::in_flight() const {
  std::lock_guard<std::mutex> lk(mu_);
  return generations_ + (int)jobs_.size() + (running_ ? 1 : 0);
}

int EngineThread::queued() const {
  std::lock_guard<std::mutex> lk(mu_);
  return (int)jobs_.size() + (int)incoming_.size() + (int)stats_.waiting.load();
}

std::string EngineThread::running_kind() const {
  std::lock_guard<std::mutex> lk(mu_);
  return running_ ? running_->kind() : "";
}

double EngineThread::busy_seconds() const {
  std::lock_guard<std::mutex> lk(mu_);
  if (!running_) return 0;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - running_since_).count();
}

void EngineThread::run_job(const std::shared_ptr<Job>& job) {
  std::string error;
  int status = 500;
  try {
    job->run(host_);
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
  {
    std::lock_guard<std::mutex> lk(mu_);
    model_ = host_.model();
  }
  refresh_stats();
  stats_.jobs_run++;
  {
    std::lock_guard<std::mutex> lk(mu_);
    running_.reset();
  }
  idle_cv_.notify_all();
  if (error.empty()) job->publish();
  else job->fail(error, status);
}

void EngineThread::start_generation(const std::shared_ptr<GenJob>& g) {
  Engine* e = host_.engine();
  std::string error;
  int status = 400;
  if (!e) {
    error = "no model is loaded";
    status = 404;
  } else if (host_.model() != g->model()) {
    error = "the model was replaced while this request waited; send it again";
    status = 503;
  } else {
    try {
      GenerationRequest r = g->request(*this);
      r.opts.speculative = host_.speculative();
      e->submit(std::move(r));
      return;
    } catch (const Error& ex) {
      error = ex.what();
    }
  }
  generation_finished();
  g->fail(error, status);
}

void EngineThread::loop() {
  for (;;) {
    std::shared_ptr<Job> job;
    std::deque<std::shared_ptr<GenJob>> gens;
    {
      std::unique_lock<std::mutex> lk(mu_);
      Engine* e = host_.engine();
      cv_.wait(lk, [&] { return exit_ || !jobs_.empty() || !incoming_.empty() || (e && e->has_work()); });
      e = host_.engine();
      if (exit_ && jobs_.empty() && incoming_.empty() && !(e && e->has_work())) return;
      if (!jobs_.empty()) {  // exclusive work runs between steps
        job = jobs_.front();
        jobs_.pop_front();
        running_ = job;
        running_since_ = std::chrono::steady_clock::now();
      }
      gens.swap(incoming_);
    }
    if (job) run_job(job);
    for (auto& g : gens) start_generation(g);
    Engine* e = host_.engine();
    if (e && cancel_all_) e->cancel_all();
    if (e && e->has_work()) {
      try {
        e->step();
      } catch (const std::exception& ex) {  // a failed forward: every sequence in flight hears it
        fprintf(stderr, "kvad serve: engine step failed: %s\n", ex.what());
        e->cancel_all();
      }
    }
    refresh_stats();
    idle_cv_.notify_all();
  }
}

void EngineThread::shutdown(double grace) {
  std::unique_lock<std::mutex> lk(mu_);
  stopping_ = true;
  for (auto& j : jobs_) j->cancel();
  auto idle = [&] { return !running_ && jobs_.empty() && generations_ == 0; };
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace);
  if (!idle_cv_.wait_until(lk, deadline, idle)) {
    if (running_) running_->cancel();
    for (auto& j : jobs_) j->cancel();
    cancel_all_ = true;
    cv_.notify_all();
    idle_cv_.wait(lk, idle);
  }
}

}  // namespace kvad::serve
