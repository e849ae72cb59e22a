// The matrix product every training layer is built on, in all three shapes backprop needs:
//   forward    Y  = X · Wᵀ        (W stored [out, in], as checkpoints and kernels/matmul.h have it)
//   input grad dX = dY · W
//   weight grad dW += dYᵀ · X
// as one routine over op(A)·op(B) with either operand transposed. It is BLIS-shaped: both operands
// are packed into panels (zero-padded to the micro-tile, so edges need no special code), a
// register-blocked micro-kernel per ISA computes MR x NR tiles of C, and the blocks are sized so
// a micro-panel of A stays in L1 while the B panel streams from L2.
//
// Determinism: every element of C is summed over k in the same order whatever the thread count
// (threads split C, never k), so results are bit-identical for 1 or N threads.
#pragma once
#include <cstdint>

#include "core/cpu.h"

namespace kvad::train {

struct GemmShape {
  int64_t M, N, K;
  const float* A;
  int64_t lda;
  bool trans_a;  // op(A)[m][k] = trans_a ? A[k*lda + m] : A[m*lda + k]
  const float* B;
  int64_t ldb;
  bool trans_b;  // op(B)[k][n] = trans_b ? B[n*ldb + k] : B[k*ldb + n]
  float* C;
  int64_t ldc;
  bool accumulate = false;      // C += op(A)op(B) instead of C = op(A)op(B)
  const float* bias = nullptr;  // [N], added to every row of the product
  // Causal attention's products skip what the mask makes zero (at the granularity of micro-tiles):
  //   LowerC  only C[m][n] with n <= m is wanted (the rest may be left unwritten)
  //   LowerA  op(A)[m][k] == 0 for k > m          UpperA  op(A)[m][k] == 0 for k < m
  enum Triangle { Full, LowerC, LowerA, UpperA } triangle = Full;
  // Products in bf16, sums in f32 (AVX512-BF16's vdpbf16ps): both operands are rounded to bf16
  // (nearest even) as they are packed. Twice the multiply rate of f32 on Zen 4; Full only.
  bool bf16 = false;
};

// The trainer's choice for its linear layers' products (`kvad train --precision bf16`): read by
// linear_fwd / linear_bwd, set once before training. Master weights, gradients and optimiser state
// stay f32, and the float64 model of the gradient checks never rounds.
void set_linear_bf16(bool on);
bool linear_bf16();
// Whether this CPU has the instructions the bf16 products need (AVX512-BF16).
bool bf16_gemm_supported();

// On the process thread pool (or the calling thread alone when `parallel` is false, e.g. inside
// an already parallel loop over heads).
void gemm(const GemmShape& g, bool parallel = true, Isa isa = best_isa());

// Shorthands for the three layer shapes, row-major, contiguous.
// y[n, out] = x[n, in] · w[out, in]ᵀ (+ b)
void matmul_fwd(float* y, const float* x, const float* w, const float* b, int64_t n, int64_t in, int64_t out);
// dx[n, in] (+)= dy[n, out] · w[out, in]
void matmul_dx(float* dx, const float* dy, const float* w, int64_t n, int64_t in, int64_t out, bool accumulate);
// dw[out, in] (+)= dy[n, out]ᵀ · x[n, in]
void matmul_dw(float* dw, const float* dy, const float* x, int64_t n, int64_t in, int64_t out, bool accumulate);

// The micro-kernel contract: C[0..mr, 0..nr) (+)= A · Bp over kc steps, where Bp holds kc groups
// of NR values (packed, zero-padded) and A is either packed (kc groups of MR values, `run`) or read
// in place from rows of a row-major matrix (`run_rows`: row i at A + i*lda, for full tiles of MR
// rows only), which saves packing A when it is not transposed. `add_c`: add to C instead of
// overwriting; `bias` (nullptr or [nr]) is added too.
struct MicroKernel {
  int mr, nr;
  void (*run)(int64_t kc, const float* Ap, const float* Bp, float* C, int64_t ldc, int mr, int nr, bool add_c,
              const float* bias);
  void (*run_rows)(int64_t kc, const float* A, int64_t lda, const float* Bp, float* C, int64_t ldc, int nr,
                   bool add_c, const float* bias);
  // Optional: one NR-column panel of a transposed B (`cols` rows of storage from B, each read along
  // k; kc x NR out, zero past cols), with in-register transposes.
  void (*pack_bt)(const float* B, int64_t ldb, int64_t cols, int64_t kc, float* Bp);
  // bf16 (optional): kc values of `cols` columns of a matrix stored k by k (src[k * ld + c]) as
  // bf16 pairs in panels of `width` columns, panel q at dst + q * panel_stride, each
  // [ceil(kc/2)][width] (u32 = values k, k+1; zero past cols and kc); one panel of `rows` rows
  // stored row by row (src[r * ld + k]) the same way; and the tile over kp such pairs of A (width
  // MR) and B (NR). A and B go straight from storage to pairs, with no f32 panel between.
  void (*to_pairs)(const float* src, int64_t ld, int cols, int64_t kc, int width, int64_t panel_stride,
                   uint32_t* dst) = nullptr;
  void (*rows_to_pairs)(const float* src, int64_t ld, int rows, int64_t kc, int width, uint32_t* dst) = nullptr;
  void (*run_bf16)(int64_t kp, const uint32_t* Ap, const uint32_t* Bp, float* C, int64_t ldc, int mr, int nr,
                   bool add_c, const float* bias) = nullptr;
  // AMX (optional): A's pairs row by row, [width][kpa] (what an A tile reads), instead of to_pairs'
  // [kpa][width]; and kp padded with zero pairs to a multiple of pair_align for A and B alike.
  void (*to_pair_rows)(const float* src, int64_t kc, int width, int64_t kpa, uint32_t* dst) = nullptr;
  int pair_align = 1;
  // Optional: called on each thread once its part of a product is done. AMX releases the tiles:
  // a thread holding tile state in use makes every context switch save 8 KB more, and on older
  // kernels keeps its core out of deep idle states.
  void (*done)() = nullptr;
};
MicroKernel micro_kernel(Isa isa);
// The kernel of GemmShape::bf16 products: AMX-BF16 tiles where amx_bf16_train_usable(), else
// micro_kernel(isa)'s vdpbf16ps.
MicroKernel bf16_micro_kernel(Isa isa);
// 32 x 32 tiles of C in AMX tiles (train/gemm_amx.cpp); the emulated one runs the same code over
// kernels/amx_tiles.h's model of the tiles, for tests on CPUs without AMX.
MicroKernel micro_kernel_amx();
MicroKernel micro_kernel_amx_emulated();
// amx_enabled() and amx_bf16 (core/cpu.h), and the tiles' products agreed with vdpbf16ps's on a
// small ragged product at first use, and amx_allowed().
bool amx_bf16_train_usable();
// gemm() with a given micro-kernel (tests: the emulated AMX one).
void gemm_with(const GemmShape& g, const MicroKernel& uk, bool parallel = true);
MicroKernel micro_kernel_scalar();
MicroKernel micro_kernel_avx2();
MicroKernel micro_kernel_avx512();  // with the bf16 kernel where avx512_bf16_enabled()
// gemm_avx512bf16.cpp: sets uk's to_pairs and run_bf16 (AVX512-BF16's instructions).
void add_bf16_avx512(MicroKernel& uk);

// The reference: a plain triple loop in T (float or double), k ascending. Tests compare with it,
// and the float64 model used by the gradient checks runs on it.
template <typename T>
void gemm_ref(int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, bool trans_a, const T* B, int64_t ldb,
              bool trans_b, T* C, int64_t ldc, bool accumulate, const T* bias) {
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) {
      T s = 0;
      for (int64_t k = 0; k < K; k++)
        s += (trans_a ? A[k * lda + m] : A[m * lda + k]) * (trans_b ? B[n * ldb + k] : B[k * ldb + n]);
      if (bias) s += bias[n];
      C[m * ldc + n] = accumulate ? C[m * ldc + n] + s : s;
    }
}

}  // namespace kvad::train
