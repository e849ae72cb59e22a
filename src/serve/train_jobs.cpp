#include "serve/train_jobs.h"

#include <algorithm>
#include <cctype>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <regex>

#include "core/fs.h"
#include "io/store.h"
#include "serve/child.h"
#include "serve/openai.h"
#include "serve/request_fields.h"

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

bool valid_job_name(const std::string& n) {
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

namespace {

std::string name_field(const Json& b, const char* what) {
  std::string name = has(b, "name") ? get_string(b, "name") : "";
  if (!valid_job_name(name))
    bad("name", fmt::format("'name' must be {} name: letters, digits, - _ . (it becomes a folder in kvad's store)", what));
  return name;
}

// Chat JSONL as kvad train reads it: the first non-blank line is an object with "messages".
bool looks_like_chat_jsonl(const std::string& text) {
  size_t at = text.find_first_not_of(" \t\r\n");
  if (at == std::string::npos || text[at] != '{') return false;
  size_t nl = text.find('\n', at);
  Json first = Json::parse(text.substr(at, nl == std::string::npos ? std::string::npos : nl - at), nullptr, false);
  return first.is_object() && first.contains("messages");
}

// "targets": all-linear or module names (q_proj,v_proj; GPT-2's c_attn), comma-separated. Only the
// shape is checked here; kvad train names a module the base lacks, in the job's log.
std::string lora_targets_field(const Json& b) {
  std::string t = get_string(b, "targets");
  int names = 1;
  for (char c : t) names += c == ',';
  bool ok = !t.empty() && t.size() <= 200 && names <= 16 && t.front() != ',' && t.back() != ',' &&
            t.find(",,") == std::string::npos &&
            std::all_of(t.begin(), t.end(), [](unsigned char c) { return std::isalnum(c) || c == '_' || c == '-' || c == '.' || c == ','; });
  if (!ok) bad("targets", "'targets' must be all-linear or module names separated by commas (q_proj,v_proj), at most 16");
  return t;
}

}  // namespace

Json TrainJobs::start(const Json& b) {
  if (!available()) throw HttpError(501, why_unavailable(), "not_implemented");
  if (!b.is_object()) bad("", "the body must be a JSON object");
  std::string kind = has(b, "kind") ? get_string(b, "kind") : "model";
  if (kind != "model" && kind != "lora") bad("kind", "'kind' must be model (a model from scratch) or lora (an adapter)");
  return launch(kind == "lora" ? lora_plan(b) : model_plan(b));
}

TrainJobs::Plan TrainJobs::model_plan(const Json& b) const {
  auto str = [&](const char* k, const std::string& d) { return has(b, k) ? get_string(b, k) : d; };
  std::string name = name_field(b, "a model"), text = str("text", ""), size = str("size", "tiny"), arch = str("arch", "gpt2");
  if (text.size() < 1000)
    bad("text", fmt::format("'text' is {} bytes: training needs at least 1000 bytes of text (more is better)", text.size()));
  const Size* sz = nullptr;
  for (const Size& s : kSizes)
    if (size == s.name) sz = &s;
  if (!sz) bad("size", "'size' must be tiny, small or medium");
  if (arch != "gpt2" && arch != "llama") bad("arch", "'arch' must be gpt2 or llama");
  int64_t steps = has(b, "steps") ? get_int(b, "steps", 1, 1000000) : 300;
  Plan p;
  p.job->name = name;
  p.job->total_steps = steps;
  p.text = std::move(text);
  int64_t every = std::max<int64_t>(1, steps / 4);
  p.args = {"--name", name, "--arch", arch,
            "--layers", std::to_string(sz->layers), "--dim", std::to_string(sz->dim),
            "--heads", std::to_string(sz->heads), "--context", std::to_string(sz->context),
            "--steps", std::to_string(steps), "--log-every", std::to_string(std::max<int64_t>(1, steps / 100)),
            "--eval-every", std::to_string(every), "--save-every", std::to_string(every)};
  if (has(b, "replace") && get_bool(b, "replace")) p.args.push_back("--force");
  p.job->params = {{"name", name}, {"size", size}, {"arch", arch}, {"steps", steps}, {"layers", sz->layers},
                   {"dim", sz->dim}, {"heads", sz->heads}, {"context", sz->context}, {"bytes", p.text.size()}};
  return p;
}

TrainJobs::Plan TrainJobs::lora_plan(const Json& b) const {
  std::string name = name_field(b, "an adapter");
  if (!has(b, "base")) bad("base", "'base' (the model to adapt, as the Models page names it) is required");
  std::string base = get_string(b, "base");
  if (base.empty() || base.size() > 1000) bad("base", "'base' must name a model the Models page lists");
  std::string text = has(b, "text") ? get_string(b, "text") : "";
  const bool chat = looks_like_chat_jsonl(text);
  if (text.size() < (chat ? 100 : 1000))
    bad("text", fmt::format("'text' is {} bytes: fine-tuning needs at least {} bytes of {}", text.size(), chat ? 100 : 1000,
                            chat ? "chat JSONL" : "text (or chat JSONL: one {\"messages\": [...]} a line)"));
  const int64_t rank = has(b, "rank") ? get_int(b, "rank", 1, 256) : 8;
  const double alpha = has(b, "alpha") ? get_number(b, "alpha", 0.001, 4096) : 2.0 * (double)rank;
  const int64_t steps = has(b, "steps") ? get_int(b, "steps", 1, 100000) : 200;
  const int64_t batch = has(b, "batch") ? get_int(b, "batch", 1, 64) : 8;
  const int64_t context = has(b, "context") ? get_int(b, "context", 16, 4096) : 0;  // 0: the base's, up to 512
  const bool replace = has(b, "replace") && get_bool(b, "replace");
  const bool rslora = has(b, "rslora") && get_bool(b, "rslora");
  const double lr = has(b, "lr") ? get_number(b, "lr", 1e-6, 1.0) : 0;  // 0: kvad train's default
  const std::string targets = has(b, "targets") ? lora_targets_field(b) : "all-linear";
  if (!hooks_.base_path) throw HttpError(501, "LoRA jobs need the server's model list", "not_implemented");
  std::string base_path = hooks_.base_path(base);  // 404 unless the Models page lists it
  Plan p;
  p.job->kind = "lora";
  p.job->name = name;
  p.job->base = base;
  p.job->base_path = base_path;
  p.job->total_steps = steps;
  p.text = std::move(text);
  if (chat) p.ext = ".jsonl";  // what kvad train reads as chat JSONL
  int64_t every = std::max<int64_t>(1, steps / 4);
  p.args = {"--lora", "--base", base_path, "--name", name, "--rank", std::to_string(rank), "--alpha",
            fmt::format("{}", alpha), "--batch", std::to_string(batch), "--steps", std::to_string(steps),
            "--log-every", std::to_string(std::max<int64_t>(1, steps / 100)), "--eval-every", std::to_string(every),
            "--save-every", std::to_string(every)};
  if (context > 0) p.args.insert(p.args.end(), {"--context", std::to_string(context)});
  if (lr > 0) p.args.insert(p.args.end(), {"--lr", fmt::format("{}", lr)});
  if (rslora) p.args.push_back("--rslora");
  p.args.insert(p.args.end(), {"--targets", targets});
  if (replace) p.args.push_back("--force");
  p.job->params = {{"name", name}, {"base", base}, {"rank", rank}, {"alpha", alpha}, {"steps", steps},
                   {"batch", batch}, {"context", context > 0 ? Json(context) : Json(nullptr)},
                   {"lr", lr > 0 ? Json(lr) : Json(nullptr)}, {"rslora", rslora}, {"targets", targets},
                   {"format", chat ? "chat" : "text"}, {"bytes", p.text.size()}};
  return p;
}

Json TrainJobs::launch(Plan p) {
  std::lock_guard<std::mutex> lk(mu_);
  for (auto& j : jobs_)
    if (j->state == "running")
      throw HttpError(409, fmt::format("training job {} ('{}') is still running; cancel it or wait", j->id, j->name),
                      "invalid_request_error");
  std::shared_ptr<Job> job = p.job;
  job->id = next_id_++;
  std::string dir = join_path(store_cache_dir(), "train-uploads");
  make_directories(dir);
  job->data_path = join_path(dir, fmt::format("{}-{}{}", job->name, job->id, p.ext));
  atomic_write_file(job->data_path, p.text);
  std::vector<std::string> args = {exe_, "train", "--data", job->data_path};
  args.insert(args.end(), p.args.begin(), p.args.end());
  Child c;
  try {
    c = spawn_child(args);
  } catch (const Error& e) {
    unlink(job->data_path.c_str());
    throw HttpError(500, e.what(), "server_error");
  }
  job->pid = c.pid;
  job->started = now_s();
  jobs_.push_back(job);
  job->watcher = std::thread([this, job, c] { watch(job, c); });
  return job_json(*job, true);
}

void TrainJobs::on_line(Job& j, const std::string& line, bool from_stdout, std::string& sample, int64_t& sample_step) {
  static const std::regex progress(R"(^step (\d+)/(\d+)\s+loss ([0-9.eE+-]+|nan|inf))");
  static const std::regex val(R"(^step (\d+): val loss ([0-9.eE+-]+), ([0-9.eE+-]+) bits/char)");
  static const std::regex sample_head(R"(^--- sample at step (\d+) ---$)");
  static const std::regex base_val(R"(^step 0 \(the base\): val loss ([0-9.eE+-]+), ([0-9.eE+-]+) bits/char)");
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
  } else if (std::regex_search(line, m, base_val)) {  // a LoRA job: the base's own figure, at step 0
    j.val.push_back({0, std::stod(m[1]), std::stod(m[2])});
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
  unlink(job->data_path.c_str());
  // A LoRA job's adapter joins the server's (when its base is loaded) before the job reads as
  // finished, so the page's "use in chat" finds it.
  Json adapter;
  if (code == 0 && job->kind == "lora" && hooks_.attach) {
    try {
      adapter = hooks_.attach(job->name, join_path(store_adapters_dir(), job->name), job->base, job->base_path);
    } catch (const std::exception& e) {
      adapter = {{"loaded", false}, {"message", e.what()}};
    }
  }
  std::lock_guard<std::mutex> lk(mu_);
  job->adapter = std::move(adapter);
  job->exit_code = code;
  job->ended = now_s();
  job->state = code == 0 ? "finished" : job->cancel_requested ? "cancelled" : "failed";
}

Json TrainJobs::job_json(const Job& j, bool details) const {
  Json r = {{"id", j.id},
            {"kind", j.kind},
            {"name", j.name},
            {"state", j.state},
            {"params", j.params},
            {"exit_code", j.exit_code},
            {"started", j.started},
            {"seconds", (j.ended > 0 ? j.ended : now_s()) - j.started},
            {"step", j.loss.empty() ? 0 : j.loss.back().first},
            {"total_steps", j.total_steps},
            {"last_loss", j.loss.empty() ? Json(nullptr) : Json(j.loss.back().second)}};
  if (j.kind == "lora") {
    r["base"] = j.base;
    r["adapter"] = j.adapter.is_null() ? Json(nullptr) : j.adapter;
  }
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
