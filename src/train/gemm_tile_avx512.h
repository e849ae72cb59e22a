// The AVX-512 training micro-kernels' tile (12 rows x 32 columns of C in 24 zmm accumulators), its
// store, and the 16 x 16 register transpose their packing uses (B's panels in f32, A's and B's
// bf16 pairs), shared by gemm_avx512.cpp (f32) and gemm_avx512bf16.cpp (vdpbf16ps). Internal
// linkage: the two files are compiled with different instruction sets (kernels/x86_helpers.h).
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace kvad::train {
namespace {

constexpr int MR = 12, NR = 32;

// 16 x 16 transpose in registers: r[i] holds row i, afterwards column i. Fully unrolled: rolled,
// the loops kept r and t on the stack, a load and a store per shuffle (rows_to_pairs on 12 hot
// rows: 5.3 -> 7.4 G values/s on Zen 4).
__attribute__((always_inline)) inline void transpose16(__m512 r[16]) {
  __m512 t[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
#pragma GCC unroll 16
  for (int i = 0; i < 16; i += 4) {
#pragma GCC unroll 2
    for (int j = 0; j < 2; j++) {
      __m512d a = _mm512_castps_pd(t[i + j]), b = _mm512_castps_pd(t[i + j + 2]);
      r[i + j] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
      r[i + j + 2] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
    }
  }
  // Now each 128-bit lane l of r[i] holds a 4x4 block; gather lanes across groups of four rows.
#pragma GCC unroll 4
  for (int i = 0; i < 4; i++) {
    __m512 a = r[i], b = r[i + 4], c = r[i + 8], d = r[i + 12];
    __m512 ab_lo = _mm512_shuffle_f32x4(a, b, 0x44), ab_hi = _mm512_shuffle_f32x4(a, b, 0xEE);
    __m512 cd_lo = _mm512_shuffle_f32x4(c, d, 0x44), cd_hi = _mm512_shuffle_f32x4(c, d, 0xEE);
    t[i] = _mm512_shuffle_f32x4(ab_lo, cd_lo, 0x88);
    t[i + 4] = _mm512_shuffle_f32x4(ab_lo, cd_lo, 0xDD);
    t[i + 8] = _mm512_shuffle_f32x4(ab_hi, cd_hi, 0x88);
    t[i + 12] = _mm512_shuffle_f32x4(ab_hi, cd_hi, 0xDD);
  }
  // t[i + 4q] holds column 4q + (lane order of the unpacks): put them back in column order.
  static const int order[16] = {0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15};
#pragma GCC unroll 16
  for (int i = 0; i < 16; i++) r[i] = t[order[i]];
}

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
