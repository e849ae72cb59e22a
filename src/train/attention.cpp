// Causal multi-head self-attention with grouped key/value heads, per (sequence, head):
//   forward   S = Q Kᵀ,  P = softmax(scale * S) over j <= i,  O = P V
//   backward  dP = dO Vᵀ,  dS = scale * P ∘ (dP - rowsum(P ∘ dP)),
//             dQ = dS K,  dK = dSᵀ Q,  dV = Pᵀ dO
// P is kept from the forward. Heads run in parallel; the backward runs per key/value head, so the
// query heads that share it add their dK, dV one after another (no races, a fixed order).
// The mask makes P (and dS) zero above the diagonal, so every product skips the micro-tiles of
// zeros (GemmShape::Triangle): a little over half of the full T x T work.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/threads.h"
#include "train/layers.h"
#include "train/rowops.h"

namespace kvad::train {

template <typename T>
void attention_fwd(T* out, T* probs, const T* qkv, const AttnShape& s) {
  const RowOps<T>& ops = rowops<T>();
  const int64_t T_ = s.T, hd = s.hd, ld = s.qkv_width(), Q = s.H * hd, group = s.H / s.KV;
  const T scale = (T)(1.0 / std::sqrt((double)hd));
  pool().parallel_for(s.B * s.H, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; i++) {
      int64_t b = i / s.H, h = i % s.H, kvh = h / group;
      const T* base = qkv + b * T_ * ld;
      const T *q = base + h * hd, *k = base + Q + kvh * hd, *v = base + Q + s.KV * hd + kvh * hd;
      T *p = probs + i * T_ * T_, *o = out + b * T_ * Q + h * hd;
      gemm_t<T>(T_, T_, hd, q, ld, false, k, ld, true, p, T_, false, nullptr, false, GemmShape::LowerC);
      ops.causal_softmax_fwd(p, p, T_, T_, scale);
      gemm_t<T>(T_, hd, T_, p, T_, false, v, ld, false, o, Q, false, nullptr, false, GemmShape::LowerA);
    }
  });
}

template <typename T>
void attention_bwd(T* dqkv, const T* dout, const T* qkv, const T* probs, const AttnShape& s) {
  const RowOps<T>& ops = rowops<T>();
  const int64_t T_ = s.T, hd = s.hd, ld = s.qkv_width(), Q = s.H * hd, group = s.H / s.KV;
  const T scale = (T)(1.0 / std::sqrt((double)hd));
  pool().parallel_for(s.B * s.KV, 1, [&](int64_t i0, int64_t i1) {
    thread_local std::vector<T> dp;
    dp.resize((size_t)(T_ * T_));
    for (int64_t i = i0; i < i1; i++) {
      int64_t b = i / s.KV, kvh = i % s.KV;
      const T* base = qkv + b * T_ * ld;
      T* dbase = dqkv + b * T_ * ld;
      const T *k = base + Q + kvh * hd, *v = base + Q + s.KV * hd + kvh * hd;
      T *dk = dbase + Q + kvh * hd, *dv = dbase + Q + s.KV * hd + kvh * hd;
      for (int64_t h = kvh * group; h < (kvh + 1) * group; h++) {
        const T* q = base + h * hd;
        const T* p = probs + (b * s.H + h) * T_ * T_;
        const T* dO = dout + b * T_ * Q + h * hd;
        const bool first = h == kvh * group;
        T *ds = dp.data(), *dq = dbase + h * hd;
        gemm_t<T>(T_, T_, hd, dO, Q, false, v, ld, true, ds, T_, false, nullptr, false, GemmShape::LowerC);
        ops.causal_softmax_bwd(ds, p, ds, T_, T_, scale);
        gemm_t<T>(T_, hd, T_, ds, T_, false, k, ld, false, dq, ld, false, nullptr, false, GemmShape::LowerA);
        gemm_t<T>(T_, hd, T_, ds, T_, true, q, ld, false, dk, ld, !first, nullptr, false, GemmShape::UpperA);
        gemm_t<T>(T_, hd, T_, p, T_, true, dO, Q, false, dv, ld, !first, nullptr, false, GemmShape::UpperA);
      }
    }
  });
}

template void attention_fwd<float>(float*, float*, const float*, const AttnShape&);
template void attention_fwd<double>(double*, double*, const double*, const AttnShape&);
template void attention_bwd<float>(float*, const float*, const float*, const float*, const AttnShape&);
template void attention_bwd<double>(double*, const double*, const double*, const double*, const AttnShape&);

}  // namespace kvad::train
