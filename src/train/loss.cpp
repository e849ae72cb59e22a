// Softmax cross-entropy, the loss of next-token prediction, over the scored rows only:
//   a row whose target is < 0 is not scored (padding, the user and system tokens of a chat): its
//   loss is 0 and its dlogits row is 0. With n = the number of rows whose target is >= 0,
//   forward   loss = (1/n) Σ_scored ( logsumexp(logits[r]) - logits[r, target[r]] )
//   backward  dlogits[r] = (softmax(logits[r]) - onehot(target[r])) / n      (scored rows)
// computed in one pass per row (rowops cross_entropy); the mean is summed in row order in double,
// skipping unscored rows, so a batch gives exactly the loss and gradients it would give with its
// unscored rows removed, on any number of threads. No scored row: loss 0, every dlogit 0.
// Under data-parallel training each rank scores its share of the batch with n = the whole batch's
// scored count (which differs from the share's own when chat padding and prompts are unscored).
#include "core/threads.h"
#include "train/layers.h"
#include "train/rowops.h"

namespace kvad::train {

template <typename T>
double cross_entropy(T* logits, T* loss, const int32_t* targets, int64_t rows, int64_t V, int64_t scored_total) {
  const RowOps<T>& ops = rowops<T>();
  int64_t scored = 0;
  for (int64_t r = 0; r < rows; r++) scored += targets[r] >= 0;
  const int64_t n = scored_total > 0 ? scored_total : scored;
  const T scale = scored ? (T)(1.0 / (double)n) : (T)0;
  pool().parallel_for(rows, 16, [&](int64_t r0, int64_t r1) {
    ops.cross_entropy(logits + r0 * V, loss + r0, targets + r0, r1 - r0, V, scale);
  });
  if (!scored) return 0;
  double sum = 0;
  for (int64_t r = 0; r < rows; r++)
    if (targets[r] >= 0) sum += (double)loss[r];
  return sum / (double)n;
}

template double cross_entropy<float>(float*, float*, const int32_t*, int64_t, int64_t, int64_t);
template double cross_entropy<double>(double*, double*, const int32_t*, int64_t, int64_t, int64_t);

}  // namespace kvad::train
