// What `kvad train` shows while it runs: on a terminal one line redrawn in place
//   step  120/1000 [###.......]  12% | loss 2.1234 | 23,456 chars/s | ETA 3m12s
// elsewhere the same as a plain line every `log_every` steps. Other messages clear it first.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>

namespace kvad::train {

class Progress {
 public:
  Progress(FILE* f, int64_t total_steps, int64_t log_every);
  void step(int64_t step, double loss, double chars_per_s, double eta_seconds);
  // Prints a message on `to` (e.g. stdout) without tearing the progress line.
  void message(FILE* to, const std::string& text);
  void finish();

 private:
  FILE* f_;
  bool tty_;
  int64_t total_, log_every_;
  bool drawn_ = false;
};

std::string format_duration(double seconds);  // 3m12s, 1h04m, 45s

}  // namespace kvad::train
