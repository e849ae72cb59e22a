// AdamW over the model's flat parameter buffer: decoupled weight decay on matrices and embeddings
// only, bias correction, global gradient-norm clipping, and the learning-rate schedule.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "train/model.h"

namespace kvad::train {

struct LrSchedule {
  enum Kind { Constant, Cosine } kind = Cosine;
  double lr = 1e-3, min_lr = 1e-4;
  int64_t warmup = 0, total = 1;
  // The rate for 1-based step: linear warm-up over `warmup` steps (step/warmup * lr), then
  // constant, or cosine from lr down to min_lr at step `total`.
  double at(int64_t step) const;
};
LrSchedule::Kind parse_schedule(const std::string& s);  // "constant" | "cosine"

struct AdamWConfig {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
  double grad_clip = 1.0;  // max global gradient norm; 0 = no clipping
};

class AdamW {
 public:
  AdamW(const ParamLayout& layout, const AdamWConfig& cfg);
  // One update from `grads` (not modified) at 1-based `step` with rate `lr`. Returns the gradient
  // norm before clipping. The order of every sum is fixed: bit-identical for any thread count.
  double update(float* params, const float* grads, int64_t step, double lr);
  std::vector<float>& m() { return m_; }
  std::vector<float>& v() { return v_; }

 private:
  struct Span {
    int64_t offset, size;
    bool decay;
  };
  AdamWConfig cfg_;
  std::vector<Span> spans_;  // the tensors cut into pieces of bounded size: the unit of work
  std::vector<float> m_, v_;
};

}  // namespace kvad::train
