// AVX-512 micro-kernel: 12 rows x 32 columns of C in 24 zmm accumulators; per k, two loads of B
// and twelve broadcasts of A feed 24 FMAs. Edge tiles use masked loads/stores. A comes packed
// (12 values per k) or straight from 12 rows of a row-major matrix.
#include <immintrin.h>

#include "train/gemm.h"

namespace kvad::train {

namespace {

constexpr int MR = 12, NR = 32;

// A(i, k) for the packed layout (row stride 1, k stride MR), or rows in place (row stride lda, k
// stride 1): four pointers, to rows 0, 3, 6, 9, reach the other rows as p[lda] and p[2*lda], which
// x86 addresses directly, so the loop keeps everything in registers. In place needs all MR rows.
struct PackedA {
  const float* p;
  float at(int i) const { return p[i]; }
  void next() { p += MR; }
};
struct RowsA {
  const float *r0, *r3, *r6, *r9;
  int64_t lda;
  RowsA(const float* a, int64_t ld) : r0(a), r3(a + 3 * ld), r6(a + 6 * ld), r9(a + 9 * ld), lda(ld) {}
  float at(int i) const {
    const float* r = i < 3 ? r0 : i < 6 ? r3 : i < 9 ? r6 : r9;
    return r[(i % 3) * lda];
  }
  void next() { r0++, r3++, r6++, r9++; }
};

template <typename A>
inline void tile(int64_t kc, A a, const float* B, float* C, int64_t ldc, int mr, int nr, bool add_c,
                 const float* bias) {
  __m512 c[MR][2];
#pragma GCC unroll 12
  for (int i = 0; i < MR; i++) c[i][0] = c[i][1] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; k++, B += NR) {
    __m512 b0 = _mm512_load_ps(B), b1 = _mm512_load_ps(B + 16);
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++) {
      __m512 av = _mm512_set1_ps(a.at(i));
      c[i][0] = _mm512_fmadd_ps(av, b0, c[i][0]);
      c[i][1] = _mm512_fmadd_ps(av, b1, c[i][1]);
    }
    a.next();
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

void ukernel(int64_t kc, const float* A, const float* B, float* C, int64_t ldc, int mr, int nr, bool add_c,
             const float* bias) {
  tile(kc, PackedA{A}, B, C, ldc, mr, nr, add_c, bias);
}

void ukernel_rows(int64_t kc, const float* A, int64_t lda, const float* B, float* C, int64_t ldc, int nr, bool add_c,
                  const float* bias) {
  tile(kc, RowsA(A, lda), B, C, ldc, MR, nr, add_c, bias);
}

}  // namespace

MicroKernel micro_kernel_avx512() { return {MR, NR, ukernel, ukernel_rows}; }

}  // namespace kvad::train
