// The layers of a GPT, each a forward and a backward written side by side (one file per layer),
// in T = float (the trainer: SIMD kernels, threads) or T = double (the gradient checks: the plain
// reference kernels). Activations are row-major [rows = batch * time, width]. Backward functions
// say per output whether they overwrite (=) or accumulate (+=): the residual stream's gradient is
// accumulated, parameter gradients are written by the one layer that owns them (the tied
// embedding is the exception: the head writes it, the embedding adds to it).
#pragma once
#include <cstdint>
#include <vector>

#include "train/gemm.h"

namespace kvad::train {

// C = op(A) op(B) (+ bias) in T: the SIMD gemm for float, the reference loop for double.
template <typename T>
void gemm_t(int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, bool ta, const T* B, int64_t ldb, bool tb,
            T* C, int64_t ldc, bool accumulate, const T* bias, bool parallel = true,
            GemmShape::Triangle triangle = GemmShape::Full);

// ---- linear.cpp: y = x Wᵀ + b, W [out, in]; y += x Wᵀ + b when accumulate (a residual stream).
template <typename T>
void linear_fwd(T* y, const T* x, const T* w, const T* b, int64_t rows, int64_t in, int64_t out,
                bool accumulate = false);
// dx (= or += when accumulate_dx), dw =, db = (db may be null: no bias). dx may be null (not needed);
// dw may be null (a frozen weight, as the base is when training a LoRA adapter: half the work).
template <typename T>
void linear_bwd(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, int64_t rows, int64_t in, int64_t out,
                bool accumulate_dx = false);

// ---- norm.cpp: LayerNorm (w, b) and RMSNorm (w only; b == null), per row of C.
template <typename T>
void norm_fwd(T* out, T* mean, T* rstd, const T* x, const T* w, const T* b, int64_t rows, int64_t C, T eps);
// dx +=, dw =, db =. LayerNorm is told by its mean: for RMSNorm pass mean == db == null. dw == null:
// only dx (a frozen norm; a frozen LayerNorm passes db == null too).
template <typename T>
void norm_bwd(T* dx, T* dw, T* db, const T* dout, const T* x, const T* mean, const T* rstd, const T* w,
              int64_t rows, int64_t C);

// ---- attention.cpp: causal self-attention on a fused qkv row [q: H*hd | k: KV*hd | v: KV*hd],
// query head h reading key/value head h / (H / KV) (grouped-query attention when KV < H).
struct AttnShape {
  int64_t B, T, H, KV, hd;
  int64_t qkv_width() const { return (H + 2 * KV) * hd; }
};
// out [B*T, H*hd] =; probs [B, H, T, T] = (saved for the backward).
template <typename T>
void attention_fwd(T* out, T* probs, const T* qkv, const AttnShape& s);
// dqkv [B*T, qkv_width] =.
template <typename T>
void attention_bwd(T* dqkv, const T* dout, const T* qkv, const T* probs, const AttnShape& s);

// ---- norm.cpp: Qwen3's q_norm / k_norm, an RMSNorm of each head of q and of k inside qkv rows
// (one weight [hd] per kind, shared by the heads), in place. saved [B*T*(H+KV)*hd] keeps the
// inputs, rstd [B*T*(H+KV)]; scratch holds 2 * B*T*(H+KV)*hd values.
template <typename T>
void qk_norm_fwd(T* qkv, T* saved, T* rstd, T* scratch, const T* wq, const T* wk, const AttnShape& s, T eps);
// In place on dqkv's q and k parts; dwq, dwk = (null: frozen, not wanted).
template <typename T>
void qk_norm_bwd(T* dqkv, T* dwq, T* dwk, T* scratch, const T* saved, const T* rstd, const T* wq, const T* wk,
                 const AttnShape& s);

// ---- rope.cpp: rotary embedding of the q and k parts of qkv rows, position = row % T.
template <typename T>
struct RopeTables {
  std::vector<T> cos, sin;  // [T, hd/2]: angle pos * theta^(-2i/hd), computed in double
  int64_t half = 0;
  // inv_freq: the frequencies of a scaled rope (a base's llama3 / linear scaling), else theta's.
  RopeTables(int64_t Tn, int64_t hd, double theta, const std::vector<double>& inv_freq = {});
};
// In place on qkv (forward) or on dqkv (backward: the inverse rotation).
template <typename T>
void rope_qk(T* qkv, const RopeTables<T>& tab, const AttnShape& s, bool backward);

// ---- activation.cpp: GELU (tanh) over n values; SwiGLU over rows of [gate | up].
template <typename T>
void gelu_fwd(T* out, const T* x, int64_t n);
template <typename T>
void gelu_bwd(T* dx, const T* x, const T* dout, int64_t n);  // dx = (may alias dout)
template <typename T>
void swiglu_fwd(T* out, const T* gate_up, int64_t rows, int64_t I);
template <typename T>
void swiglu_bwd(T* dgate_up, const T* gate_up, const T* dout, int64_t rows, int64_t I);  // =

// ---- embedding.cpp: x[b, t] = wte[token] (+ wpe[t] when wpe is not null).
template <typename T>
void embedding_fwd(T* x, const int32_t* tokens, const T* wte, const T* wpe, int64_t B, int64_t Tn, int64_t C,
                   int64_t V);
// dwte += (scatter by token), dwpe = (sum over the batch; when not null).
template <typename T>
void embedding_bwd(T* dwte, T* dwpe, const T* dx, const int32_t* tokens, int64_t B, int64_t Tn, int64_t C);

// ---- loss.cpp: softmax cross-entropy of logits [rows, V]. A row whose target is < 0 is not scored
// (padding, non-assistant tokens): its loss and dlogits are 0. Writes loss per row and replaces the
// logits by dlogits = (softmax - onehot) / n, n = the number of scored rows (the gradient of the
// mean loss over them). Returns that mean; 0 when no row is scored. With `scored_total` > 0 the
// rows are one share of a larger batch that scores that many targets in all (a rank's share under
// data-parallel training): n = scored_total, and the return is this share's loss sum / n, so the
// shares' returns and gradients add up to the whole batch's.
template <typename T>
double cross_entropy(T* logits, T* loss, const int32_t* targets, int64_t rows, int64_t V, int64_t scored_total = 0);

}  // namespace kvad::train
