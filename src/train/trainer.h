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
#include "train/lora.h"
#include "train/model.h"
#include "train/optim.h"

namespace kvad::train {

// kvad train --lora: a Hugging Face base, frozen (base.h), and a LoRA adapter (lora.h) trained on
// the base's own tokens of --data (token_data.h: plain text, or chat JSONL with the loss on the
// assistant's turns), saved as a PEFT folder that `--lora` runs and PEFT loads.
struct LoraTrainOptions {
  std::string base;        // the base model's folder
  std::string base_name;   // as the user named it (adapter_config.json base_model_name_or_path)
  std::string base_quant;  // "" (as stored) or "q8" (QLoRA-style: learn against the q8 values)
  LoraConfig adapter;      // rank, alpha, rsLoRA, targets
};

struct TrainOptions {
  std::string data;  // the corpus
  std::string dir;   // the model (or adapter) folder to write (the CLI puts it in kvad's store)
  ModelShape shape;  // vocab comes from the corpus; under LoRA the shape is the base's (context from here)
  bool lora = false;
  LoraTrainOptions lora_opts;
  bool all_bytes = false;
  int64_t batch = 16, steps = 1000;
  LrSchedule lr;     // total = steps; min_lr < 0 means lr / 10
  AdamWConfig adam;
  uint64_t seed = 1337;
  // "f32", or "bf16": the linear layers' products round their operands to bf16 and sum in f32
  // (train/gemm.h); weights, gradients and AdamW's state stay f32. docs/training.md: its speed and loss.
  std::string precision = "f32";
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
