// The MLP's non-linearities, element-wise over the batch (formulas in rowops.cpp):
//   GELU (tanh form)  y = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x³)))
//   SwiGLU            y = silu(gate) * up,  silu(g) = g * sigmoid(g)
#include "core/threads.h"
#include "train/layers.h"
#include "train/rowops.h"

namespace kvad::train {

namespace {
constexpr int64_t kGrain = 4096;  // elements per unit of work
}

template <typename T>
void gelu_fwd(T* out, const T* x, int64_t n) {
  const RowOps<T>& ops = rowops<T>();
  pool().parallel_for(n, kGrain, [&](int64_t b, int64_t e) { ops.gelu_fwd(out + b, x + b, e - b); });
}

template <typename T>
void gelu_bwd(T* dx, const T* x, const T* dout, int64_t n) {
  const RowOps<T>& ops = rowops<T>();
  pool().parallel_for(n, kGrain, [&](int64_t b, int64_t e) { ops.gelu_bwd(dx + b, x + b, dout + b, e - b); });
}

template <typename T>
void swiglu_fwd(T* out, const T* gu, int64_t rows, int64_t I) {
  const RowOps<T>& ops = rowops<T>();
  pool().parallel_for(rows, 8, [&](int64_t b, int64_t e) { ops.swiglu_fwd(out + b * I, gu + b * 2 * I, e - b, I); });
}

template <typename T>
void swiglu_bwd(T* dgu, const T* gu, const T* dout, int64_t rows, int64_t I) {
  const RowOps<T>& ops = rowops<T>();
  pool().parallel_for(rows, 8, [&](int64_t b, int64_t e) {
    ops.swiglu_bwd(dgu + b * 2 * I, gu + b * 2 * I, dout + b * I, e - b, I);
  });
}

#define KVAD_INSTANTIATE(T)                                                 \
  template void gelu_fwd<T>(T*, const T*, int64_t);                        \
  template void gelu_bwd<T>(T*, const T*, const T*, int64_t);              \
  template void swiglu_fwd<T>(T*, const T*, int64_t, int64_t);             \
  template void swiglu_bwd<T>(T*, const T*, const T*, int64_t, int64_t);
KVAD_INSTANTIATE(float)
KVAD_INSTANTIATE(double)
#undef KVAD_INSTANTIATE

}  // namespace kvad::train
