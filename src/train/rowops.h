// The element-wise and row-wise kernels of training, forward and backward side by side: norms,
// activations, the causal softmax of attention, RoPE, cross-entropy, AdamW. Every kernel has a
// plain reference (rowops_ref.h, in float or double: the float64 model of the gradient checks runs
// on it) and a SIMD version (rowops_simd.h, compiled once per ISA) tested against it.
//
// Conventions: rows are contiguous with `n` (or C) elements; "+=" outputs accumulate, "=" ones
// overwrite; outputs may alias inputs only where said.
#pragma once
#include <cstdint>

#include "core/cpu.h"

namespace kvad::train {

template <typename T>
struct RowOps {
  // LayerNorm (GPT-2): out = (x - mean) * rstd * w + b per row; saves mean and rstd per row.
  void (*layernorm_fwd)(T* out, T* mean, T* rstd, const T* x, const T* w, const T* b, int64_t rows, int64_t C,
                        T eps);
  // dx += ..., dw += Σ dout*xhat, db += Σ dout over the rows.
  void (*layernorm_bwd)(T* dx, T* dw, T* db, const T* dout, const T* x, const T* mean, const T* rstd, const T* w,
                        int64_t rows, int64_t C);
  // RMSNorm (Llama): out = x * rstd * w, rstd = 1/sqrt(mean(x²) + eps).
  void (*rmsnorm_fwd)(T* out, T* rstd, const T* x, const T* w, int64_t rows, int64_t C, T eps);
  void (*rmsnorm_bwd)(T* dx, T* dw, const T* dout, const T* x, const T* rstd, const T* w, int64_t rows, int64_t C);

  // GELU, tanh form: out = gelu(x) (out may alias x); dx = dout * gelu'(x) (dx may alias dout).
  void (*gelu_fwd)(T* out, const T* x, int64_t n);
  void (*gelu_bwd)(T* dx, const T* x, const T* dout, int64_t n);
  // SwiGLU on rows of [gate (I) | up (I)]: out[r] = silu(gate) * up, out is [rows, I].
  void (*swiglu_fwd)(T* out, const T* gate_up, int64_t rows, int64_t I);
  void (*swiglu_bwd)(T* dgate_up, const T* gate_up, const T* dout, int64_t rows, int64_t I);

  // Causal softmax of one head's scores: rows i < T of s (stride ld): p[i, j] = softmax_j<=i(scale *
  // s[i, j]), p[i, j > i] = 0. p may alias s.
  void (*causal_softmax_fwd)(T* p, const T* s, int64_t Tn, int64_t ld, T scale);
  // ds[i, j] = scale * p[i, j] * (dp[i, j] - Σ_j p[i, j] dp[i, j]), zero above the diagonal; ds may
  // alias dp.
  void (*causal_softmax_bwd)(T* ds, const T* p, const T* dp, int64_t Tn, int64_t ld, T scale);

  // Rotary embedding (rotate-half) of `heads` heads of hd values in one row, by the angles whose
  // cos/sin are given (hd/2 each). inverse = rotate back (the backward pass).
  void (*rope)(T* x, int64_t heads, int64_t hd, const T* cos, const T* sin, bool inverse);

  // Softmax cross-entropy per row of logits [rows, V]: loss[r] = -log softmax(logits[r])[target[r]];
  // logits are replaced by dlogits = (softmax - onehot) * grad_scale. A row whose target is < 0 is
  // not scored: loss[r] = 0 and its dlogits are 0.
  void (*cross_entropy)(T* logits, T* loss, const int32_t* targets, int64_t rows, int64_t V, T grad_scale);

  // AdamW (decoupled weight decay), PyTorch's formula, on the gradient g * gscale (the clipping):
  //   p *= 1 - lr*wd;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g²;
  //   p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps)      with bc = 1 - beta^step
  void (*adamw)(T* p, const T* g, T* m, T* v, int64_t n, T gscale, T lr, T b1, T b2, T eps, T wd, T bc1, T bc2);
  // Σ x² (for the gradient norm), accumulated in double.
  double (*sum_squares)(const T* x, int64_t n);
  // acc[j] += Σ_r x[r, j] over rows of n (bias gradients).
  void (*add_rows)(T* acc, const T* x, int64_t rows, int64_t n);
};

// The kernels for float on this CPU (or the given ISA), and the plain reference in float or double.
const RowOps<float>& rowops_f32(Isa isa = best_isa());
template <typename T>
const RowOps<T>& rowops_ref();
// What the model in T uses: SIMD for float, the reference for double.
template <typename T>
const RowOps<T>& rowops() {
  if constexpr (sizeof(T) == sizeof(float)) return rowops_f32();
  else return rowops_ref<T>();
}

RowOps<float> rowops_avx2();
RowOps<float> rowops_avx512();

}  // namespace kvad::train
