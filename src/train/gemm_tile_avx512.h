// The AVX-512 training micro-kernels' tile (12 rows x 32 columns of C in 24 zmm accumulators) and
// its store, shared by gemm_avx512.cpp (f32) and gemm_avx512bf16.cpp (vdpbf16ps). Internal
// linkage: the two files are compiled with different instruction sets (kernels/x86_helpers.h).
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace kvad::train {
namespace {

constexpr int MR = 12, NR = 32;

// The tile's accumulators into C's first mr rows and nr columns (+ bias, + C when add_c).
__attribute__((always_inline)) inline void store_tile(const __m512 (&c)[MR][2], float* C, int64_t ldc, int mr, int nr,
                                                      bool add_c, const float* bias) {
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
}  // namespace kvad::train
