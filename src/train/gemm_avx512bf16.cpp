// The AVX512-BF16 training micro-kernel (GemmShape::bf16): A and B rounded to bf16 pairs, one
// vdpbf16ps per (row, half) per pair of k, sums in f32. Only where avx512_bf16_enabled()
// (core/cpu.h): gemm_avx512.cpp, compiled without BF16, adds it to its MicroKernel.
#include <immintrin.h>

#include "train/gemm.h"
#include "train/gemm_tile_avx512.h"

namespace kvad::train {

namespace {

// A packed panel [kc][width] of f32 into bf16 pairs [ceil(kc/2)][width]: rows k and k+1 are
// rounded together (vcvtne2ps2bf16, nearest even) and interleaved so that each 32-bit lane holds
// one column's (k, k+1): what vdpbf16ps multiplies pairwise.
void to_pairs(const float* src, int64_t kc, int width, uint32_t* dst) {
  static const __m512i interleave = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,
                                                     23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  for (int64_t k = 0; k < kc; k += 2, dst += width) {
    const float* r0 = src + k * width;
    for (int c = 0; c < width; c += 16) {
      const int n = width - c < 16 ? width - c : 16;
      const __mmask16 m = (__mmask16)(n == 16 ? 0xFFFF : (1u << n) - 1);
      __m512 lo = _mm512_maskz_loadu_ps(m, r0 + c);
      __m512 hi = k + 1 < kc ? _mm512_maskz_loadu_ps(m, r0 + width + c) : _mm512_setzero_ps();
      __m512i both = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);  // lo's 16 values, then hi's
      _mm512_mask_storeu_epi32(dst + c, m, _mm512_permutexvar_epi16(interleave, both));
    }
  }
}

// The bf16 tile: 12 x 32 of C as the f32 one, one vdpbf16ps per (row, half) per pair of k.
void ukernel_bf16(int64_t kp, const uint32_t* A, const uint32_t* B, float* C, int64_t ldc, int mr, int nr, bool add_c,
                  const float* bias) {
  __m512 c[MR][2];
#pragma GCC unroll 12
  for (int i = 0; i < MR; i++) c[i][0] = c[i][1] = _mm512_setzero_ps();
  for (int64_t p = 0; p < kp; p++, A += MR, B += NR) {
    __m512bh b0 = (__m512bh)_mm512_load_si512(B), b1 = (__m512bh)_mm512_load_si512(B + 16);
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++) {
      __m512bh av = (__m512bh)_mm512_set1_epi32((int)A[i]);
      c[i][0] = _mm512_dpbf16_ps(c[i][0], av, b0);
      c[i][1] = _mm512_dpbf16_ps(c[i][1], av, b1);
    }
  }
  store_tile(c, C, ldc, mr, nr, add_c, bias);
}

}  // namespace

void add_bf16_avx512(MicroKernel& uk) {
  uk.to_pairs = to_pairs;
  uk.run_bf16 = ukernel_bf16;
}

}  // namespace kvad::train
