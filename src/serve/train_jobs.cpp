#include "serve/train_jobs.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <regex>

#include "core/fs.h"
#include "io/store.h"
#include "serve/child.h"
#include "serve/openai.h"

namespace kvad::serve {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

struct Size {
  const char* name;
  int layers, dim, heads, context;
};
constexpr Size kSizes[] = {{"tiny", 2, 64, 4, 64}, {"small", 4, 128, 4, 128}, {"medium", 6, 256, 8, 256}};

bool valid_name(const std::string& n) {
  if (n.empty() || n.size() > 100 || n[0] == '.') return false;
  for (char c : n)
    if (!(isalnum((unsigned char)c) || c == '-' || c == '_' || c == '.')) return false;
  return true;
}

}  // namespace

TrainJobs::TrainJobs(const ServeOptions& opts) : exe_(kvad_exe(opts.self_exe)) {}

TrainJobs::~TrainJobs() {
  cancel_all();
  std::vector<std::shared_ptr<Job>> jobs;
  {
    std::lock_guard<std::mutex> lk(mu_);
    jobs = jobs_;
  }
  for (auto& j : jobs)
    if (j->watcher.joinable()) j->watcher.join();
}

Json TrainJobs::start(const Json& b) {
  if (!available()) throw HttpError(501, why_unavailable(), "not_implemented");
  auto str = [&](const char* k, const std::string& d) {
    if (!b.contains(k) || b[k].is_null()) return d;
    if (!b[k].is_string()) throw HttpError(400, fmt::format("'{}' must be a string", k), "invalid_request_error", k);
    return b[k].get<std::string>();
  };
  std::string name = str("name", ""), text = str("text", ""), size = str("size", "tiny"), arch = str("arch", "gpt2");
  if (!valid_name(name))
    throw HttpError(400, "'name' must be a model name: letters, digits, - _ . (it becomes a folder in kvad's store)",
                    "invalid_request_error", "name");
  if (text.size() < 1000)
    throw HttpError(400, fmt::format("'text' is {} bytes: training needs at least 1000 bytes of text (more is better)", text.size()),
                    "invalid_request_error", "text");
  const Size* sz = nullptr;
  for (const Size& s : kSizes)
    if (size == s.name) sz = &s;
  if (!sz) throw HttpError(400, "'size' must be tiny, small or medium", "invalid_request_error", "size");
  if (arch != "gpt2" && arch != "llama") throw HttpError(400, "'arch' must be gpt2 or llama", "invalid_request_error", "arch");
  int64_t steps = b.contains("steps") && b["steps"].is_number_integer() ? b["steps"].get<int64_t>() : 300;
  if (steps < 1 || steps > 1000000) throw HttpError(400, "'steps' must be in 1..1000000", "invalid_request_error", "steps");
  bool replace = b.contains("replace") && b["replace"].is_boolean() && b["replace"].get<bool>();

  std::lock_guard<std::mutex> lk(mu_);
  for (auto& j : jobs_)
    if (j->state == "running")
      throw HttpError(409, fmt::format("training job {} ('{}') is still running; cancel it or wait", j->id, j->name),
                      "invalid_request_error");
  auto job = std::make_shared<Job>();
  job->id = next_id_++;
  job->name = name;
  job->total_steps = steps;
  std::string dir = join_path(store_cache_dir(), "train-uploads");
  make_directories(dir);
  job->data_path = join_path(dir, fmt::format("{}-{}.txt", name, job->id));
  atomic_write_file(job->data_path, text);
  int64_t every = std::max<int64_t>(1, steps / 4);
  std::vector<std::string> args = {exe_, "train", "--data", job->data_path, "--name", name, "--arch", arch,
                                   "--layers", std::to_string(sz->layers), "--dim", std::to_string(sz->dim),
                                   "--heads", std::to_string(sz->heads), "--context", std::to_string(sz->context),
                                   "--steps", std::to_string(steps), "--log-every", std::to_string(std::max<int64_t>(1, steps / 100)),
                                   "--eval-every", std::to_string(every), "--save-every", std::to_string(every)};
  if (replace) args.push_back("--force");
  job->params = {{"name", name}, {"size", size}, {"arch", arch}, {"steps", steps}, {"layers", sz->layers},
                 {"dim", sz->dim}, {"heads", sz->heads}, {"context", sz->context}, {"bytes", text.size()}};

  Child c;
  try {
    c = spawn_child(args);
  } catch (const Error& e) {
    throw HttpError(500, e.what(), "server_error");
  }
  pid_t pid = c.pid;
  job->pid = pid;
  job->started = now_s();
  jobs_.push_back(job);
  job->watcher = std::thread([this, job, c] { watch(job, c); });
  return job_json(*job, true);
}

void TrainJobs::on_line(Job& j, const std::string& line, bool from_stdout, std::string& sample, int64_t& sample_step) {
  static const std::regex progress(R"(^step (\d+)/(\d+)\s+loss ([0-9.eE+-]+|nan|inf))");
  static const std::regex val(R"(^step (\d+): val loss ([0-9.eE+-]+), ([0-9.eE+-]+) bits/char)");
  static const std::regex sample_head(R"(^--- sample at step (\d+) ---$)");
  std::smatch m;
  if (from_stdout && sample_step >= 0) {  // inside a sample block
    if (line == "---") {
      j.samples.push_back({sample_step, sample});
      sample.clear();
      sample_step = -1;
    } else {
      sample += (sample.empty() ? "" : "\n") + line;
    }
    return;
  }
  j.log.push_back(line);
  while (j.log.size() > 60) j.log.pop_front();
  if (std::regex_search(line, m, progress)) {
    j.loss.push_back({std::stoll(m[1]), std::strtod(m[3].str().c_str(), nullptr)});
    j.total_steps = std::stoll(m[2]);
  } else if (std::regex_search(line, m, val)) {
    j.val.push_back({std::stoll(m[1]), std::stod(m[2]), std::stod(m[3])});
  } else if (std::regex_match(line, m, sample_head)) {
    sample_step = std::stoll(m[1]);
    j.log.pop_back();
  } else if (from_stdout && !line.empty() && line[0] == '{') {
    Json s = Json::parse(line, nullptr, false);
    if (!s.is_discarded()) j.summary = s;
  }
}

void TrainJobs::watch(std::shared_ptr<Job> job, Child c) {
  std::string sample;
  int64_t sample_step = -1;
  int code = drain_child(c, [&](const std::string& line, bool from_stdout) {
    std::lock_guard<std::mutex> lk(mu_);
    on_line(*job, line, from_stdout, sample, sample_step);
  });
  std::lock_guard<std::mutex> lk(mu_);
  job->exit_code = code;
  job->ended = now_s();
  job->state = code == 0 ? "finished" : job->cancel_requested ? "cancelled" : "failed";
  unlink(job->data_path.c_str());
}

Json TrainJobs::job_json(const Job& j, bool details) const {
  Json r = {{"id", j.id},
            {"name", j.name},
            {"state", j.state},
            {"params", j.params},
            {"exit_code", j.exit_code},
            {"started", j.started},
            {"seconds", (j.ended > 0 ? j.ended : now_s()) - j.started},
            {"step", j.loss.empty() ? 0 : j.loss.back().first},
            {"total_steps", j.total_steps},
            {"last_loss", j.loss.empty() ? Json(nullptr) : Json(j.loss.back().second)}};
  if (!details) return r;
  Json loss = Json::array(), val = Json::array(), samples = Json::array(), log = Json::array();
  for (const auto& [s, l] : j.loss) loss.push_back({s, l});
  for (const auto& [s, l, b] : j.val) val.push_back({s, l, b});
  for (const auto& [s, t] : j.samples) samples.push_back({{"step", s}, {"text", t}});
  for (const std::string& l : j.log) log.push_back(l);
  r["loss"] = loss;
  r["val"] = val;
  r["samples"] = samples;
  r["log"] = log;
  r["summary"] = j.summary.is_null() ? Json(nullptr) : j.summary;
  return r;
}

Json TrainJobs::status() const {
  std::lock_guard<std::mutex> lk(mu_);
  Json jobs = Json::array();
  for (auto it = jobs_.rbegin(); it != jobs_.rend(); ++it) jobs.push_back(job_json(**it, false));
  return {{"available", available()},
          {"reason", available() ? "" : why_unavailable()},
          {"sizes", {{"tiny", "2 layers, dim 64, context 64"}, {"small", "4 layers, dim 128, context 128"},
                     {"medium", "6 layers, dim 256, context 256"}}},
          {"jobs", jobs},
          {"current", jobs_.empty() ? Json(nullptr) : job_json(*jobs_.back(), true)}};
}

void TrainJobs::cancel(int64_t id) {
  std::lock_guard<std::mutex> lk(mu_);
  for (auto& j : jobs_)
    if (j->id == id) {
      if (j->state != "running") throw HttpError(409, fmt::format("training job {} is not running", id), "invalid_request_error");
      j->cancel_requested = true;
      kill(j->pid, SIGINT);
      return;
    }
  throw HttpError(404, fmt::format("no training job {}", id), "invalid_request_error");
}

void TrainJobs::cancel_all() {
  std::lock_guard<std::mutex> lk(mu_);
  for (auto& j : jobs_)
    if (j->state == "running" && !j->cancel_requested) {
      j->cancel_requested = true;
      kill(j->pid, SIGINT);
    }
}

}  // namespace kvad::serve
