// Where a training step's time goes: with KVAD_TRAIN_PROFILE=1, each phase of the forward and
// backward (named scopes on the calling thread) adds its wall time to a table that
// `kvad train` prints at the end. Off (one branch per scope) otherwise.
#pragma once
#include <chrono>
#include <cstdio>

namespace kvad::train {

bool profiling();
void profile_add(const char* phase, double seconds);
void profile_report(FILE* f);  // the table, largest first; then cleared

class PhaseTimer {
 public:
  explicit PhaseTimer(const char* phase) : phase_(profiling() ? phase : nullptr) {
    if (phase_) t0_ = std::chrono::steady_clock::now();
  }
  ~PhaseTimer() {
    if (phase_) profile_add(phase_, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count());
  }
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

 private:
  const char* phase_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace kvad::train
