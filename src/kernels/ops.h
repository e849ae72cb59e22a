// Element-wise and row-wise operations of a transformer layer. Norms and RoPE are a small share of
// the time and stay plain loops; the activations call exp once per element, which over a long
// prompt is not small, so they have SIMD versions (ops_<isa>.cpp) beside the scalar reference.
#pragma once
#include <cstdint>

#include "core/cpu.h"
#include "core/threads.h"

namespace kvad::kernels {

// Values from which row-wise and element-wise work is split over the pool: below (a decode
// step's rows), waking it costs more than it saves.
inline constexpr int64_t kPoolFrom = 32 * 1024;
// fn(b, e) over rows [0, rows) of `cols` values each: on the pool, a contiguous share of rows
// per thread, when the rows hold kPoolFrom values or more (a prefill's); else on this thread.
// A prefill's residual adds, biases and rotations were one thread's loops while the products
// around them ran on every core (docs/kernels.md, "Prefill's row-wise operations").
template <typename F>
void rows_on_pool(int64_t rows, int64_t cols, F&& fn) {
  if (rows < 2 || rows * cols < kPoolFrom) return fn(int64_t{0}, rows);
  pool().parallel_for(rows, 1, fn);
}

// out = x / rms(x) * w   (RMSNorm, Llama/Qwen). out may alias x. The mean of squares in double.
void rmsnorm(const float* x, const float* w, float eps, int64_t n, float* out);
// The same for `rows` rows (x and out `stride` floats apart; out may alias x), on the pool when
// they are many. The SIMD path sums the squares in double lanes (16 at a time in two registers),
// another order than rmsnorm's: within a rounding of the same scale. A prefill's norms (Qwen3's
// per-head q/k norms are 12,288 rows of 128 a layer at 512 tokens) were 7% of its time as one
// thread's scalar loop, whose double sum waited on itself every element.
void rmsnorm_rows(const float* x, int64_t x_stride, const float* w, float eps, int64_t rows, int64_t n, float* out,
                  int64_t out_stride, Isa isa = best_isa());
// out = (x - mean) / std * w + b   (LayerNorm, GPT-2). out may alias x.
void layernorm(const float* x, const float* w, const float* b, float eps, int64_t n, float* out);
// x = softmax(x) in place, max-subtracted.
void softmax(float* x, int64_t n);
// x = softmax(scale * x) in place: attention's row over thousands of keys (an image's 4,096
// tokens), where a scalar exp per score would cost more than the products that made them.
void softmax_scaled(float* x, int64_t n, float scale, Isa isa = best_isa());
// The same row's numerators for a bf16 product: out[i] = bf16(exp(scale * (x[i] - max x))) for
// i < n, zero for n <= i < n_out; returns their sum (before rounding), by which the caller
// divides the product's row: one pass over the row instead of softmax_scaled's three. The SIMD
// exp is a degree-4 polynomial (< 5e-5 relative, 1/40 of bf16's rounding), so a value may round
// to the neighbouring bf16 of the exact one. The SIMD path needs AVX512-BF16 (avx512_bf16_enabled(), core/cpu.h).
float softmax_numerators_bf16(const float* x, int64_t n, float scale, uint16_t* out, int64_t n_out,
                              Isa isa = best_isa());
// gate = silu(gate) * up   (SwiGLU); runs on the pool for large n
void silu_mul(float* gate, const float* up, int64_t n, Isa isa = best_isa());
// out[i] = value[i] * gelu(gate[i]) with the exact (erf) GELU: GEGLU's product (a UNet's
// feed-forward, 2 x 4,096 x 1,280 of them per block at SD 1.5's first level). The SIMD erf is
// Abramowitz & Stegun 7.1.26 (|error| <= 1.5e-7) on the vectorised exp.
void gelu_erf_mul(const float* value, const float* gate, float* out, int64_t n, Isa isa = best_isa());
// Per-channel moments of a block of channels-last rows x [rows, c] about `center` [c]:
// s1[ch] += sum_r (x - center[ch]), s2[ch] += sum_r (x - center[ch])^2, summed in f32 over runs of
// 64 rows and in double across runs (a GroupNorm's statistics over 4,096+ pixels).
void channel_moments(const float* x, int64_t rows, int64_t c, const float* center, double* s1, double* s2,
                     Isa isa = best_isa());
// x[r, ch] = x[r, ch] * scale[ch] + shift[ch], then SiLU when `silu`; in place (a GroupNorm's
// normalisation and affine folded into one scale and shift per channel).
void channel_affine(float* x, int64_t rows, int64_t c, const float* scale, const float* shift, bool silu,
                    Isa isa = best_isa());
// x = gelu_tanh(x)   (GPT-2's "gelu_new")
void gelu_tanh(float* x, int64_t n, Isa isa = best_isa());
// y += x (on the pool from kPoolFrom values)
void add(float* y, const float* x, int64_t n);
// y[i] += sum_j coef[j] * rows[j * stride + i], i < n, j < r: a rank-r update of one row (the LoRA
// side path's t B^T, with B^T as `rows` [r, stride]; n < stride updates a slice of the row, with
// `rows` pointing at the slice's first column); y is read and written once, whatever r is.
void lowrank_add(float* y, const float* coef, const float* rows, int64_t r, int64_t n, int64_t stride, Isa isa = best_isa());
// The same with `rows` in bf16 (a LoRA pair beside a bf16 or quantised base: half the bytes).
void lowrank_add_bf16(float* y, const float* coef, const uint16_t* rows, int64_t r, int64_t n, int64_t stride,
                      Isa isa = best_isa());
// y += b, for each of n rows of width m
void add_bias(float* y, const float* b, int64_t n, int64_t m);

// Rotary position embedding, rotate-half (GPT-NeoX) convention, as transformers' Llama/Qwen:
// for i < d/2: (x[i], x[i+d/2]) rotated by pos * inv_freq[i]. x holds n_heads heads of head_dim.
void rope_neox(float* x, int n_heads, int head_dim, const float* cos, const float* sin);
// The same rotation over adjacent pairs (x[2i], x[2i+1]) (GPT-J, DeepSeek's "complex" rope): the
// first rot_dims columns from x of each of n_heads heads that lie head_stride floats apart.
void rope_pairs(float* x, int n_heads, int head_stride, int rot_dims, const float* cos, const float* sin);

}  // namespace kvad::kernels
