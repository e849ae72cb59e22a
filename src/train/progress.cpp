#include "train/progress.h"

#include <unistd.h>

#include <cmath>

#include <fmt/format.h>

namespace kvad::train {

std::string format_duration(double s) {
  if (!(s >= 0) || std::isinf(s)) return "?";
  int64_t t = (int64_t)std::llround(s);
  if (t < 60) return fmt::format("{}s", t);
  if (t < 3600) return fmt::format("{}m{:02}s", t / 60, t % 60);
  return fmt::format("{}h{:02}m", t / 3600, t / 60 % 60);
}

static std::string thousands(double v) {
  std::string s = fmt::format("{:.0f}", v), out;
  for (size_t i = 0; i < s.size(); i++) {
    if (i && (s.size() - i) % 3 == 0 && s[i - 1] != '-') out += ',';
    out += s[i];
  }
  return out;
}

Progress::Progress(FILE* f, int64_t total_steps, int64_t log_every)
    : f_(f), tty_(f && isatty(fileno(f))), total_(total_steps), log_every_(log_every) {
  if (log_every_ <= 0) log_every_ = std::max<int64_t>(1, total_ / 20);
}

void Progress::step(int64_t step, double loss, double cps, double eta) {
  if (!f_) return;
  if (tty_) {
    constexpr int kWidth = 20;
    int filled = (int)(kWidth * step / std::max<int64_t>(1, total_));
    std::string bar(kWidth, '.');
    for (int i = 0; i < filled; i++) bar[(size_t)i] = '#';
    fmt::print(f_, "\r\033[Kstep {:>{}}/{} [{}] {:3}% | loss {:.4f} | {} chars/s | ETA {}", step,
               (int)std::to_string(total_).size(), total_, bar, 100 * step / std::max<int64_t>(1, total_), loss,
               thousands(cps), format_duration(eta));
    drawn_ = true;
  } else if (step % log_every_ == 0 || step == total_) {
    fmt::print(f_, "step {}/{}  loss {:.4f}  {} chars/s  ETA {}\n", step, total_, loss, thousands(cps),
               format_duration(eta));
  }
  std::fflush(f_);
}

void Progress::message(FILE* to, const std::string& text) {
  if (drawn_) {
    fmt::print(f_, "\r\033[K");
    std::fflush(f_);
    drawn_ = false;
  }
  if (!to) return;
  fmt::print(to, "{}\n", text);
  std::fflush(to);
}

void Progress::finish() {
  if (drawn_) fmt::print(f_, "\n");
  drawn_ = false;
  if (f_) std::fflush(f_);
}

}  // namespace kvad::train
