// kvad pull ORG/NAME[@REVISION][:FILE]: download a model from the Hugging Face Hub into the shared
// HF cache, with a progress bar per file and in total. Also used by --pull on commands that load a
// model. Ctrl-C stops it cleanly: the partial file stays (the next pull resumes it), nothing
// incomplete is placed where a complete file is expected.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>

#include "cli/common.h"
#include "core/error.h"
#include "core/fs.h"
#include "io/hub.h"
#include "io/store.h"

namespace kvad::cli {

namespace {

std::atomic<bool> g_pull_interrupted{false};

void on_sigint(int) {
  if (g_pull_interrupted.load()) {  // a second Ctrl-C: stop now
    signal(SIGINT, SIG_DFL);
    raise(SIGINT);
    return;
  }
  g_pull_interrupted = true;
}

// SIGINT sets g_pull_interrupted while a pull runs; the previous handler comes back afterwards.
struct SigintGuard {
  struct sigaction old {};
  SigintGuard() {
    g_pull_interrupted = false;
    struct sigaction sa {};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old);
  }
  ~SigintGuard() { sigaction(SIGINT, &old, nullptr); }
};

std::string fmt_duration(double s) {
  if (!(s >= 0) || s > 360000) return "--:--";
  int t = (int)(s + 0.5);
  if (t >= 3600) return fmt::format("{}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60);
  return fmt::format("{}:{:02}", t / 60, t % 60);
}

// Two lines on a terminal (the current file, the total), redrawn at most 10 times a second;
// finished files scroll up as a log. Not a terminal: one line per file started and finished.
class ProgressBar : public hf::PullProgress {
 public:
  explicit ProgressBar(bool quiet) : quiet_(quiet), tty_(isatty(2)) {}

  void plan(const std::vector<std::pair<std::string, uint64_t>>& files) override {
    for (auto& [p, size] : files) total_ += size;
    nfiles_ = (int)files.size();
    start_ = std::chrono::steady_clock::now();
    if (!quiet_ && nfiles_)
      std::fprintf(stderr, "downloading %d file(s), %s\n", nfiles_, format_bytes(total_).c_str());
  }
  void file_started(const std::string& name, uint64_t size, uint64_t resumed_from) override {
    name_ = name;
    size_ = size;
    have_ = resumed_from;
    file_start_ = std::chrono::steady_clock::now();
    if (quiet_) return;
    if (resumed_from) {
      if (tty_) clear_lines();
      std::fprintf(stderr, "  %s: resuming at %s of %s\n", name.c_str(), format_bytes(resumed_from).c_str(),
                   format_bytes(size).c_str());
    }
    if (tty_) draw();
  }
  void file_progress(const std::string&, uint64_t have) override {
    transferred_ += have - have_;
    have_ = have;
    if (quiet_ || !tty_) return;
    auto now = std::chrono::steady_clock::now();
    if (now - last_draw_ < std::chrono::milliseconds(100)) return;
    draw();
  }
  void file_done(const std::string& name) override {
    uint64_t size = size_;
    done_bytes_ += size;
    done_files_++;
    have_ = size_ = 0;
    if (quiet_) return;
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - file_start_).count();
    std::string line = fmt::format("  {:<44} {:>10}  {}", elide_middle(name, 44), format_bytes(size), fmt_duration(s));
    if (tty_) clear_lines();
    std::fprintf(stderr, "%s\n", line.c_str());
    if (tty_) draw();
  }
  void note(const std::string& msg) override {
    if (quiet_) return;
    if (tty_) clear_lines();
    std::fprintf(stderr, "  %s\n", msg.c_str());
    if (tty_) draw();
  }
  void finish() {
    if (!quiet_ && tty_) clear_lines();
  }

 private:
  void clear_lines() {
    if (!drawn_) return;
    std::fprintf(stderr, "\r\x1b[2K\x1b[1A\r\x1b[2K");
    drawn_ = false;
  }
  void draw() {
    last_draw_ = std::chrono::steady_clock::now();
    double elapsed = std::chrono::duration<double>(last_draw_ - start_).count();
    double rate = elapsed > 0.2 ? transferred_ / elapsed : 0;
    uint64_t done = done_bytes_ + have_;
    double file_eta = rate > 0 ? (size_ - have_) / rate : -1;
    double total_eta = rate > 0 ? (total_ - std::min(total_, done)) / rate : -1;
    std::string l1 = fmt::format("  {:<44} {} {:>3}% {:>9} / {:<9} ETA {}", elide_middle(name_, 44),
                                 text_bar(size_ ? (double)have_ / size_ : 1, 20), size_ ? have_ * 100 / size_ : 100,
                                 format_bytes(have_), format_bytes(size_), fmt_duration(file_eta));
    std::string l2 = fmt::format("  {:<44} {} {:>3}% {:>9} / {:<9} ETA {}  {}/s",
                                 fmt::format("total ({}/{} files)", done_files_, nfiles_),
                                 text_bar(total_ ? (double)done / total_ : 1, 20), total_ ? done * 100 / total_ : 100,
                                 format_bytes(done), format_bytes(total_), fmt_duration(total_eta),
                                 format_bytes((uint64_t)rate));
    if (drawn_) std::fprintf(stderr, "\r\x1b[1A");
    // Each line one row: a wrapped one would push the pair down a row at every redraw.
    std::fprintf(stderr, "\r\x1b[2K%s\n\x1b[2K%s", fit_terminal_row(l1).c_str(), fit_terminal_row(l2).c_str());
    std::fflush(stderr);
    drawn_ = true;
  }

  bool quiet_, tty_;
  bool drawn_ = false;
  std::string name_;
  uint64_t size_ = 0, have_ = 0;
  uint64_t total_ = 0, done_bytes_ = 0, transferred_ = 0;
  int nfiles_ = 0, done_files_ = 0;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now(), file_start_, last_draw_;
};

}  // namespace

hf::PullResult pull_model(const std::string& name, bool quiet) {
  hf::RepoRef ref = hf::parse_repo_ref(name);
  hf::HubConfig cfg = hf::HubConfig::from_env();
  SigintGuard guard;
  cfg.cancel = &g_pull_interrupted;
  ProgressBar bar(quiet);
  try {
    hf::PullResult r = hf::pull(cfg, ref, &bar);
    bar.finish();
    return r;
  } catch (...) {
    bar.finish();
    throw;
  }
}

void pull_if_missing(const std::string& model) {
  if (is_directory(model) || find_in_store(model) || !hf::looks_like_repo_ref(model)) return;
  hf::RepoRef ref = hf::parse_repo_ref(model);
  auto c = hf::find_cached(hf::hub_cache_dir(), ref);
  if (c && c->missing.empty()) return;  // already here: no network
  std::fprintf(stderr, "kvad: %s is not in the Hugging Face cache; pulling it\n", model.c_str());
  pull_model(model, false);
}

void add_pull(CLI::App& app) {
  auto* cmd = app.add_subcommand("pull", "download a model from the Hugging Face Hub into the shared HF cache");
  auto name = std::make_shared<std::string>();
  auto quiet = std::make_shared<bool>(false);
  cmd->add_option("model", *name,
                  "ORG/NAME[@REVISION] for a whole model (config, tokenizer, safetensors), or ORG/NAME:FILE for one "
                  "file or GGUF quantisation (e.g. Qwen/Qwen2.5-0.5B-Instruct-GGUF:qwen2.5-0.5b-instruct-q8_0.gguf)")
      ->required();
  cmd->add_flag("--quiet", *quiet, "no progress bar");  // -q is --quant in every command
  cmd->footer(
      "Environment: HF_TOKEN (gated/private repos), HF_ENDPOINT (another Hub), HF_HOME / HF_HUB_CACHE (where the "
      "cache is), HF_HUB_OFFLINE=1 (never use the network), HF_HUB_ETAG_TIMEOUT / HF_HUB_DOWNLOAD_TIMEOUT (seconds).");
  cmd->callback([name, quiet] {
    auto t0 = std::chrono::steady_clock::now();
    hf::PullResult r = pull_model(*name, *quiet);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::string what = r.offline ? "in the cache (HF_HUB_OFFLINE)"
                       : r.files_downloaded == 0
                           ? "already up to date"
                           : fmt::format("downloaded {} file(s), {} in {:.1f} s", r.files_downloaded,
                                         format_bytes(r.bytes_downloaded), s);
    std::printf("%s@%s: %zu file(s), %s, %s\n%s\n", r.repo_id.c_str(), r.commit.substr(0, 12).c_str(), r.files.size(),
                format_bytes(r.bytes_total).c_str(), what.c_str(), r.snapshot_dir.c_str());
  });
}

}  // namespace kvad::cli
