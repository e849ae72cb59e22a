// AVX-512 micro-kernel: 12 rows x 32 columns of C in 24 zmm accumulators; per k, two loads of B
// and twelve broadcasts of A feed 24 FMAs. Edge tiles use masked loads/stores.
#include <immintrin.h>

#include "train/gemm.h"

namespace kvad::train {

namespace {

constexpr int MR = 12, NR = 32;

void ukernel(int64_t kc, const float* A, const float* B, float* C, int64_t ldc, int mr, int nr, bool add_c,
             const float* bias) {
  __m512 c[MR][2];
#pragma GCC unroll 12
  for (int i = 0; i < MR; i++) c[i][0] = c[i][1] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; k++, A += MR, B += NR) {
    __m512 b0 = _mm512_load_ps(B), b1 = _mm512_load_ps(B + 16);
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++) {
      __m512 a = _mm512_set1_ps(A[i]);
      c[i][0] = _mm512_fmadd_ps(a, b0, c[i][0]);
      c[i][1] = _mm512_fmadd_ps(a, b1, c[i][1]);
    }
  }
  __mmask16 m0 = nr >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << nr) - 1);
  __mmask16 m1 = nr >= 32 ? (__mmask16)0xFFFF : nr > 16 ? (__mmask16)((1u << (nr - 16)) - 1) : (__mmask16)0;
  __m512 bias0 = bias ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps();
  __m512 bias1 = bias ? _mm512_maskz_loadu_ps(m1, bias + 16) : _mm512_setzero_ps();
#pragma GCC unroll 12
  for (int i = 0; i < MR; i++) {
    if (i >= mr) break;
    float* row = C + i * ldc;
    __m512 v0 = _mm512_add_ps(c[i][0], bias0), v1 = _mm512_add_ps(c[i][1], bias1);
    if (add_c) {
      v0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, row), v0);
      v1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, row + 16), v1);
    }
    _mm512_mask_storeu_ps(row, m0, v0);
    _mm512_mask_storeu_ps(row + 16, m1, v1);
  }
}

}  // namespace

MicroKernel micro_kernel_avx512() { return {MR, NR, ukernel}; }

}  // namespace kvad::train
