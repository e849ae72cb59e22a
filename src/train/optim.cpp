#include "train/optim.h"

#include <cmath>

#include "core/error.h"
#include "core/threads.h"
#include "train/rowops.h"

namespace kvad::train {

double LrSchedule::at(int64_t step) const {
  if (warmup > 0 && step <= warmup) return lr * (double)step / (double)warmup;
  if (kind == Constant || total <= warmup) return lr;
  double progress = std::min(1.0, (double)(step - warmup) / (double)(total - warmup));
  return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(M_PI * progress));
}

LrSchedule::Kind parse_schedule(const std::string& s) {
  if (s == "constant") return LrSchedule::Constant;
  if (s == "cosine") return LrSchedule::Cosine;
  fail("unknown learning-rate schedule '{}' (constant, cosine)", s);
}

AdamW::AdamW(const ParamLayout& layout, const AdamWConfig& cfg) : cfg_(cfg) {
  constexpr int64_t kPiece = 1 << 14;
  for (const ParamInfo& p : layout.tensors)
    for (int64_t o = 0; o < p.size; o += kPiece) spans_.push_back({p.offset + o, std::min(kPiece, p.size - o), p.decay});
  m_.assign((size_t)layout.total, 0.0f);
  v_.assign((size_t)layout.total, 0.0f);
}

double AdamW::update(float* params, const float* grads, int64_t step, double lr) {
  const RowOps<float>& ops = rowops_f32();
  const int64_t n = (int64_t)spans_.size();
  // Global norm: per-span sums (any thread), added in span order.
  std::vector<double> sq((size_t)n);
  pool().parallel_for(n, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; i++) sq[(size_t)i] = ops.sum_squares(grads + spans_[(size_t)i].offset, spans_[(size_t)i].size);
  });
  double total = 0;
  for (double s : sq) total += s;
  double norm = std::sqrt(total);
  // PyTorch's clip_grad_norm_: scale by max_norm / (norm + 1e-6) when that is below 1.
  float gscale = 1.0f;
  if (cfg_.grad_clip > 0 && norm + 1e-6 > cfg_.grad_clip) gscale = (float)(cfg_.grad_clip / (norm + 1e-6));
  const float bc1 = (float)(1.0 - std::pow(cfg_.beta1, (double)step));
  const float bc2 = (float)(1.0 - std::pow(cfg_.beta2, (double)step));
  pool().parallel_for(n, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; i++) {
      const Span& s = spans_[(size_t)i];
      ops.adamw(params + s.offset, grads + s.offset, m_.data() + s.offset, v_.data() + s.offset, s.size, gscale,
                (float)lr, (float)cfg_.beta1, (float)cfg_.beta2, (float)cfg_.eps,
                s.decay ? (float)cfg_.weight_decay : 0.0f, bc1, bc2);
    }
  });
  return norm;
}

}  // namespace kvad::train
