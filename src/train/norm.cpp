// LayerNorm (GPT-2) and RMSNorm (Llama) over rows of C, on the row kernels of rowops.h.
//   LayerNorm  y = (x - mean) * rstd * w + b        RMSNorm  y = x * rstd * w
// The backward formulas are in rowops.cpp. The parameter gradients (Σ over rows) are summed in
// fixed blocks of rows and then block by block, so they do not depend on the thread count.
#include <algorithm>
#include <vector>

#include "core/threads.h"
#include "train/layers.h"
#include "train/rowops.h"

namespace kvad::train {

namespace {
constexpr int64_t kBlock = 64;  // rows per partial sum of the parameter gradients
}

template <typename T>
void norm_fwd(T* out, T* mean, T* rstd, const T* x, const T* w, const T* b, int64_t rows, int64_t C, T eps) {
  const RowOps<T>& ops = rowops<T>();
  pool().parallel_for(rows, 16, [&](int64_t r0, int64_t r1) {
    if (b) ops.layernorm_fwd(out + r0 * C, mean + r0, rstd + r0, x + r0 * C, w, b, r1 - r0, C, eps);
    else ops.rmsnorm_fwd(out + r0 * C, rstd + r0, x + r0 * C, w, r1 - r0, C, eps);
  });
}

template <typename T>
void norm_bwd(T* dx, T* dw, T* db, const T* dout, const T* x, const T* mean, const T* rstd, const T* w,
              int64_t rows, int64_t C) {
  const RowOps<T>& ops = rowops<T>();
  int64_t nb = (rows + kBlock - 1) / kBlock;
  std::vector<T> part((size_t)(nb * 2 * C), T(0));  // per block: dw partial, db partial
  pool().parallel_for(nb, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t blk = b0; blk < b1; blk++) {
      int64_t r0 = blk * kBlock, n = std::min(rows, r0 + kBlock) - r0;
      T *pw = &part[(size_t)(blk * 2 * C)], *pb = pw + C;
      if (db) ops.layernorm_bwd(dx + r0 * C, pw, pb, dout + r0 * C, x + r0 * C, mean + r0, rstd + r0, w, n, C);
      else ops.rmsnorm_bwd(dx + r0 * C, pw, dout + r0 * C, x + r0 * C, rstd + r0, w, n, C);
    }
  });
  std::fill(dw, dw + C, T(0));
  if (db) std::fill(db, db + C, T(0));
  for (int64_t blk = 0; blk < nb; blk++) {
    const T* pw = &part[(size_t)(blk * 2 * C)];
    for (int64_t i = 0; i < C; i++) dw[i] += pw[i];
    if (db)
      for (int64_t i = 0; i < C; i++) db[i] += pw[C + i];
  }
}

template void norm_fwd<float>(float*, float*, float*, const float*, const float*, const float*, int64_t, int64_t, float);
template void norm_fwd<double>(double*, double*, double*, const double*, const double*, const double*, int64_t,
                               int64_t, double);
template void norm_bwd<float>(float*, float*, float*, const float*, const float*, const float*, const float*,
                              const float*, int64_t, int64_t);
template void norm_bwd<double>(double*, double*, double*, const double*, const double*, const double*,
                               const double*, const double*, int64_t, int64_t);

}  // namespace kvad::train
