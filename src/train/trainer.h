// The training loop behind `kvad train`: corpus -> batches -> forward/backward -> AdamW, with a
// progress line, validation loss and bits per character every K steps, checkpoints (atomic, with
// the optimiser state) every K steps and on Ctrl-C, --resume that continues the same loss curve,
// and a final JSON summary comparable with the PyTorch peer's --json-out.
#pragma once
#include <atomic>
#include <cstdio>
#include <functional>
#include <set>
#include <string>

#include "core/json.h"
#include "train/model.h"
#include "train/optim.h"

namespace kvad::train {

struct TrainOptions {
  std::string data;  // the corpus
  std::string dir;   // the model folder to write (the CLI puts it in kvad's store)
  ModelShape shape;  // vocab comes from the corpus
  bool all_bytes = false;
  int64_t batch = 16, steps = 1000;
  LrSchedule lr;     // total = steps; min_lr < 0 means lr / 10
  AdamWConfig adam;
  uint64_t seed = 1337;
  int threads = 0;   // 0 = all cores
  int64_t eval_every = 250, eval_windows = 128, final_eval_windows = 0;
  int64_t save_every = 500, log_every = 0, sample_chars = 200, timing_warmup = 5;
  bool resume = false, force = false;
  std::string json_out;
  // Options given explicitly (by their flag name without dashes): on --resume the checkpoint's
  // configuration is used, and an explicit flag that contradicts it is an error.
  std::set<std::string> given;
};

struct TrainHooks {
  const std::atomic<bool>* stop = nullptr;  // set (by Ctrl-C): save at the end of the step, return
  // After each checkpoint is saved (the CLI prints a sample from it with the engine).
  std::function<void(const std::string& dir, int64_t step)> on_checkpoint;
  FILE* out = stdout;       // validation lines and the summary
  FILE* progress = stderr;  // the progress line (redrawn in place on a terminal)
};

struct TrainResult {
  Json summary;  // what --json-out writes
  bool interrupted = false;
  int64_t step = 0;
};

TrainResult run_training(TrainOptions opts, const TrainHooks& hooks);

// MemAvailable from /proc/meminfo (0 when unknown).
uint64_t available_memory_bytes();

}  // namespace kvad::train
