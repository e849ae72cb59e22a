// LayerNorm (GPT-2) and RMSNorm (Llama) over rows of C, on the row kernels of rowops.h; and
// Qwen3's per-head RMSNorm of q and k, the same RMSNorm over the heads gathered as rows.
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
      // LayerNorm is told by its mean (db is null for a frozen LayerNorm too).
      if (mean) ops.layernorm_bwd(dx + r0 * C, pw, pb, dout + r0 * C, x + r0 * C, mean + r0, rstd + r0, w, n, C);
      else ops.rmsnorm_bwd(dx + r0 * C, pw, dout + r0 * C, x + r0 * C, rstd + r0, w, n, C);
    }
  });
  if (!dw) return;  // a frozen norm: only dx was wanted
  std::fill(dw, dw + C, T(0));
  if (db) std::fill(db, db + C, T(0));
  for (int64_t blk = 0; blk < nb; blk++) {
    const T* pw = &part[(size_t)(blk * 2 * C)];
    for (int64_t i = 0; i < C; i++) dw[i] += pw[i];
    if (db)
      for (int64_t i = 0; i < C; i++) db[i] += pw[C + i];
  }
}

// The q and k parts of qkv rows as rows of hd: q heads [BT*H, hd] then k heads [BT*KV, hd].
template <typename T>
static void gather_qk(T* rows, const T* qkv, const AttnShape& s) {
  const int64_t BT = s.B * s.T, W = s.qkv_width(), q = s.H * s.hd, k = s.KV * s.hd;
  T* kr = rows + BT * q;
  for (int64_t r = 0; r < BT; r++) {
    std::copy(qkv + r * W, qkv + r * W + q, rows + r * q);
    std::copy(qkv + r * W + q, qkv + r * W + q + k, kr + r * k);
  }
}

template <typename T>
static void scatter_qk(T* qkv, const T* rows, const AttnShape& s) {
  const int64_t BT = s.B * s.T, W = s.qkv_width(), q = s.H * s.hd, k = s.KV * s.hd;
  const T* kr = rows + BT * q;
  for (int64_t r = 0; r < BT; r++) {
    std::copy(rows + r * q, rows + (r + 1) * q, qkv + r * W);
    std::copy(kr + r * k, kr + (r + 1) * k, qkv + r * W + q);
  }
}

template <typename T>
void qk_norm_fwd(T* qkv, T* saved, T* rstd, T* scratch, const T* wq, const T* wk, const AttnShape& s, T eps) {
  const int64_t nq = s.B * s.T * s.H, nk = s.B * s.T * s.KV;
  gather_qk(saved, qkv, s);
  norm_fwd<T>(scratch, nullptr, rstd, saved, wq, nullptr, nq, s.hd, eps);
  norm_fwd<T>(scratch + nq * s.hd, nullptr, rstd + nq, saved + nq * s.hd, wk, nullptr, nk, s.hd, eps);
  scatter_qk(qkv, scratch, s);
}

template <typename T>
void qk_norm_bwd(T* dqkv, T* dwq, T* dwk, T* scratch, const T* saved, const T* rstd, const T* wq, const T* wk,
                 const AttnShape& s) {
  const int64_t nq = s.B * s.T * s.H, nk = s.B * s.T * s.KV, n = (nq + nk) * s.hd;
  T *dout = scratch, *dx = scratch + n;
  gather_qk(dout, dqkv, s);
  std::fill(dx, dx + n, T(0));
  norm_bwd<T>(dx, dwq, nullptr, dout, saved, nullptr, rstd, wq, nq, s.hd);
  norm_bwd<T>(dx + nq * s.hd, dwk, nullptr, dout + nq * s.hd, saved + nq * s.hd, nullptr, rstd + nq, wk, nk, s.hd);
  scatter_qk(dqkv, dx, s);
}

template void qk_norm_fwd<float>(float*, float*, float*, float*, const float*, const float*, const AttnShape&, float);
template void qk_norm_fwd<double>(double*, double*, double*, double*, const double*, const double*, const AttnShape&,
                                  double);
template void qk_norm_bwd<float>(float*, float*, float*, float*, const float*, const float*, const float*,
                                 const float*, const AttnShape&);
template void qk_norm_bwd<double>(double*, double*, double*, double*, const double*, const double*, const double*,
                                  const double*, const AttnShape&);

template void norm_fwd<float>(float*, float*, float*, const float*, const float*, const float*, int64_t, int64_t, float);
template void norm_fwd<double>(double*, double*, double*, const double*, const double*, const double*, int64_t,
                               int64_t, double);
template void norm_bwd<float>(float*, float*, float*, const float*, const float*, const float*, const float*,
                              const float*, int64_t, int64_t);
template void norm_bwd<double>(double*, double*, double*, const double*, const double*, const double*,
                               const double*, const double*, int64_t, int64_t);

}  // namespace kvad::train
