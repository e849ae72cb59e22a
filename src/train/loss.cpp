// Softmax cross-entropy, the loss of next-token prediction:
//   forward   loss = mean_r ( logsumexp(logits[r]) - logits[r, target[r]] )
//   backward  dlogits[r] = (softmax(logits[r]) - onehot(target[r])) / rows
// computed in one pass per row (rowops cross_entropy); the mean is summed in row order in double.
#include "core/threads.h"
#include "train/layers.h"
#include "train/rowops.h"

namespace kvad::train {

template <typename T>
double cross_entropy(T* logits, T* loss, const int32_t* targets, int64_t rows, int64_t V) {
  const RowOps<T>& ops = rowops<T>();
  const T scale = (T)(1.0 / (double)rows);
  pool().parallel_for(rows, 16, [&](int64_t r0, int64_t r1) {
    ops.cross_entropy(logits + r0 * V, loss + r0, targets + r0, r1 - r0, V, scale);
  });
  double sum = 0;
  for (int64_t r = 0; r < rows; r++) sum += (double)loss[r];
  return sum / (double)rows;
}

template double cross_entropy<float>(float*, float*, const int32_t*, int64_t, int64_t);
template double cross_entropy<double>(double*, double*, const int32_t*, int64_t, int64_t);

}  // namespace kvad::train
