// Large products against a weight packed once at load: C[n, m] = A[n, k] W^T for W [m, k] as
// checkpoints store it. For an image model's convolutions and projections, where n is thousands
// of pixels: matmul()'s dot-product tiles re-read 4 activation rows of the whole k (11 KB each at
// k = 2,880) from L2 for every 4 weight rows, so they wait on L2 at ~60% of the FMA rate. Here
// the weight is cut into panels of 32 outputs, [k][32] contiguous, and a micro-tile of 12 rows x
// 32 outputs lives in 24 registers: per step of k, two loads of the panel and 12 broadcasts feed
// 24 FMAs, with k blocked (256) so the panel's block stays in L1 while 96 rows pass over it.
//
// bf16 panels hold pairs of neighbouring k per output ([k/2][32][2]) for vdpbf16ps: the
// activations are rounded to bf16 too (to nearest even), twice the f32 rate.
#pragma once
#include <cstdint>
#include <vector>

#include "core/cpu.h"

namespace kvad::kernels {

struct PackedWeight {
  int64_t m = 0, k = 0;         // outputs, inputs
  bool bf16 = false;
  std::vector<float> f32;       // [ceil(m/32)][k][32], zero-padded past m
  std::vector<uint16_t> b16;    // [ceil(m/32)][ceil(k/2)][32][2], zero-padded past m and k
  bool empty() const { return m == 0; }
  // From W [m, k] row-major; the bf16 form rounds to nearest even.
  static PackedWeight pack_f32(const float* w, int64_t m, int64_t k);
  static PackedWeight pack_bf16(const float* w, int64_t m, int64_t k);
  // bf16 from a slice of a wider array: W[o][i] = w[o * ld + i], or w[i * ld + o] when
  // `transposed` (an attention head's keys, and its values transposed, read in place from the
  // [n, heads * d] projections).
  static PackedWeight pack_bf16_strided(const float* w, int64_t m, int64_t k, int64_t ld, bool transposed);
};

// C[n, m] = A[n, k] W^T on the pool: blocks of rows x groups of panels are the pool's tasks, so a
// product of few rows (a time embedding) still splits over its outputs.
void gemm_packed(const float* a, int64_t n, const PackedWeight& w, float* c, Isa isa = best_isa());

// The same with A already rounded to bf16, [n, kp] with kp = k rounded up to even and the pad
// zero (bf16 panels only): for a caller that writes its activations in bf16 directly (an image
// convolution's im2col), saving the f32 copy and the rounding pass.
void gemm_packed_bf16(const uint16_t* a, int64_t n, int64_t kp, const PackedWeight& w, float* c, Isa isa = best_isa());
// out[i] = bf16(x[i]), to nearest even, i < n.
void to_bf16(const float* x, int64_t n, uint16_t* out, Isa isa = best_isa());

// The tasks' bodies (gemm.cpp / gemm_avx512.cpp): rows [r0, r1) x panels [p0, p1). `a` is f32
// [n, k] for f32 panels, bf16 [n, kp] (kp = k rounded up to even) for bf16 ones.
void gemm_block_scalar(const float* a, const PackedWeight& w, int64_t r0, int64_t r1, int64_t p0, int64_t p1, float* c);
// panel_k: how deep each panel is in memory when that is more than w.k (0: w.k), for a caller that
// appends to its panels and multiplies by their first w.k rows (prefill attention's values).
void gemm_block_f32_avx512(const float* a, const PackedWeight& w, int64_t r0, int64_t r1, int64_t p0, int64_t p1, float* c,
                           int64_t panel_k = 0);
// AVX512-BF16 (gemm_avx512bf16.cpp; only where avx512_bf16_enabled()): n rows of x [n, k] rounded
// to bf16 into out [n, kp], each row zero-padded to kp >= k; and the vdpbf16ps tiles.
void bf16_rows_avx512(const float* x, int64_t n, int64_t k, int64_t kp, uint16_t* out);
void gemm_block_bf16_avx512(const uint16_t* a, int64_t kp, const PackedWeight& w, int64_t r0, int64_t r1, int64_t p0,
                            int64_t p1, float* c);
// AVX-512 without BF16 (Ice Lake, Cascade Lake): bf16 panels widened in registers against f32
// activations already rounded to bf16, [n, lda] with lda >= k rounded up to even and the pad zero.
void gemm_block_bf16w_avx512(const float* a, int64_t lda, const PackedWeight& w, int64_t r0, int64_t r1, int64_t p0,
                             int64_t p1, float* c);
// AMX-BF16 (gemm_amx.cpp): the panels read as B tiles in place, 32 rows x 32 outputs a tile over
// all of k. The emulated form runs the same code over kernels/amx_tiles.h's model, for tests.
void gemm_block_bf16_amx(const uint16_t* a, int64_t kp, const PackedWeight& w, int64_t r0, int64_t r1, int64_t p0,
                         int64_t p1, float* c);
void gemm_block_bf16_amx_emulated(const uint16_t* a, int64_t kp, const PackedWeight& w, int64_t r0, int64_t r1,
                                  int64_t p0, int64_t p1, float* c);
// amx_enabled() and amx_bf16 (core/cpu.h), and the tiles reproduced the AVX-512 bf16 kernel on a
// small ragged product (to f32 rounding: the sums' order differs) at first use, and amx_allowed().
bool amx_bf16_gemm_usable();
// From one whole tile of rows: fewer would be padded copies, multiplied for nothing.
constexpr int64_t kAmxGemmRows = 32;
// AVX2 (gemm_avx2.cpp): f32 panels, and bf16 panels widened in registers against f32 activations
// already rounded to bf16, [n, lda] with lda >= k rounded up to even and the pad zero.
void gemm_block_f32_avx2(const float* a, const PackedWeight& w, int64_t r0, int64_t r1, int64_t p0, int64_t p1, float* c,
                         int64_t panel_k = 0);
void gemm_block_bf16w_avx2(const float* a, int64_t lda, const PackedWeight& w, int64_t r0, int64_t r1, int64_t p0,
                           int64_t p1, float* c);
// bf16_rows_avx512's job; n x kp bf16 widened to f32 (exact).
void bf16_rows_avx2(const float* x, int64_t n, int64_t k, int64_t kp, uint16_t* out);
void widen_bf16_rows_avx2(const uint16_t* a, int64_t n, int64_t kp, float* out);
// Both at once: n rows of x [n, k] rounded to bf16 and kept as f32 in out [n, kp] (pad zero).
void bf16_rounded_rows_avx2(const float* x, int64_t n, int64_t k, int64_t kp, float* out);

}  // namespace kvad::kernels
