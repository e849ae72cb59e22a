// Linear layer: y = x Wᵀ + b with W [out, in] (the layout checkpoints and the engine use).
//   forward   y  = x Wᵀ + b
//   backward  dx = dy W,   dW = dyᵀ x,   db = Σ_rows dy
#include <algorithm>
#include <vector>

#include "core/threads.h"
#include "train/layers.h"
#include "train/rowops.h"

namespace kvad::train {

template <typename T>
void gemm_t(int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, bool ta, const T* B, int64_t ldb, bool tb,
            T* C, int64_t ldc, bool accumulate, const T* bias, bool parallel, GemmShape::Triangle triangle) {
  if constexpr (sizeof(T) == sizeof(float)) {
    gemm({M, N, K, A, lda, ta, B, ldb, tb, C, ldc, accumulate, bias, triangle}, parallel);
  } else {  // the reference computes everything (the skipped parts are zeros or not wanted)
    gemm_ref<T>(M, N, K, A, lda, ta, B, ldb, tb, C, ldc, accumulate, bias);
  }
}

// The linear layers' products in f32, or in bf16 when the trainer asked (set_linear_bf16); the
// float64 reference of the gradient checks always computes exactly.
template <typename T>
static void linear_gemm(int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, bool ta, const T* B, int64_t ldb,
                        bool tb, T* C, int64_t ldc, bool accumulate, const T* bias) {
  if constexpr (sizeof(T) == sizeof(float)) {
    GemmShape g{M, N, K, A, lda, ta, B, ldb, tb, C, ldc, accumulate, bias};
    g.bf16 = linear_bf16();
    gemm(g);
  } else {
    gemm_t<T>(M, N, K, A, lda, ta, B, ldb, tb, C, ldc, accumulate, bias);
  }
}

template <typename T>
void linear_fwd(T* y, const T* x, const T* w, const T* b, int64_t rows, int64_t in, int64_t out, bool accumulate) {
  linear_gemm<T>(rows, out, in, x, in, false, w, in, true, y, out, accumulate, b);
}

// db = column sums of dy. Rows are summed in fixed blocks and the blocks in order, so the result
// does not depend on the thread count.
template <typename T>
static void column_sums(T* db, const T* dy, int64_t rows, int64_t out) {
  constexpr int64_t kBlock = 128;
  int64_t nb = (rows + kBlock - 1) / kBlock;
  std::vector<T> part((size_t)(nb * out), T(0));
  const RowOps<T>& ops = rowops<T>();
  pool().parallel_for(nb, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; b++) {
      int64_t r0 = b * kBlock;
      ops.add_rows(&part[(size_t)(b * out)], dy + r0 * out, std::min(rows, r0 + kBlock) - r0, out);
    }
  });
  std::fill(db, db + out, T(0));
  ops.add_rows(db, part.data(), nb, out);
}

template <typename T>
void linear_bwd(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, int64_t rows, int64_t in, int64_t out,
                bool accumulate_dx) {
  if (dx) linear_gemm<T>(rows, in, out, dy, out, false, w, in, false, dx, in, accumulate_dx, nullptr);
  if (dw) linear_gemm<T>(out, in, rows, dy, out, true, x, in, false, dw, in, false, nullptr);
  if (db) column_sums(db, dy, rows, out);
}

#define KVAD_INSTANTIATE(T)                                                                                     \
  template void gemm_t<T>(int64_t, int64_t, int64_t, const T*, int64_t, bool, const T*, int64_t, bool, T*,      \
                          int64_t, bool, const T*, bool, GemmShape::Triangle);                                  \
  template void linear_fwd<T>(T*, const T*, const T*, const T*, int64_t, int64_t, int64_t, bool);              \
  template void linear_bwd<T>(T*, T*, T*, const T*, const T*, const T*, int64_t, int64_t, int64_t, bool);
KVAD_INSTANTIATE(float)
KVAD_INSTANTIATE(double)
#undef KVAD_INSTANTIATE

}  // namespace kvad::train
