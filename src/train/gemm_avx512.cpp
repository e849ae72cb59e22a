// AVX-512 micro-kernel: 12 rows x 32 columns of C in 24 zmm accumulators; per k, two loads of B
// and twelve broadcasts of A feed 24 FMAs. Edge tiles use masked loads/stores. A comes packed
// (12 values per k) or straight from 12 rows of a row-major matrix.
#include <immintrin.h>

#include "core/cpu.h"
#include "train/gemm.h"
#include "train/gemm_tile_avx512.h"

namespace kvad::train {

namespace {

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
__attribute__((always_inline)) inline void tile(int64_t kc, A a, const float* B, float* C, int64_t ldc, int mr, int nr, bool add_c,
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
  store_tile(c, C, ldc, mr, nr, add_c, bias);
}

void ukernel(int64_t kc, const float* A, const float* B, float* C, int64_t ldc, int mr, int nr, bool add_c,
             const float* bias) {
  tile(kc, PackedA{A}, B, C, ldc, mr, nr, add_c, bias);
}

void ukernel_rows(int64_t kc, const float* A, int64_t lda, const float* B, float* C, int64_t ldc, int nr, bool add_c,
                  const float* bias) {
  tile(kc, RowsA(A, lda), B, C, ldc, MR, nr, add_c, bias);
}

void pack_bt(const float* B, int64_t ldb, int64_t cols, int64_t kc, float* Bp) {
  for (int64_t k = 0; k < kc; k += 16) {
    int64_t n = kc - k < 16 ? kc - k : 16;
    __mmask16 mask = (__mmask16)(n == 16 ? 0xFFFF : (1u << n) - 1);
    for (int half = 0; half < 2; half++) {
      __m512 r[16];
      for (int j = 0; j < 16; j++) {
        int64_t col = half * 16 + j;
        r[j] = col < cols ? _mm512_maskz_loadu_ps(mask, B + col * ldb + k) : _mm512_setzero_ps();
      }
      transpose16(r);
      for (int64_t t = 0; t < n; t++) _mm512_store_ps(Bp + (k + t) * NR + half * 16, r[t]);
    }
  }
}

}  // namespace

MicroKernel micro_kernel_avx512() {
  MicroKernel uk{MR, NR, ukernel, ukernel_rows, pack_bt};
  if (avx512_bf16_enabled()) add_bf16_avx512(uk);
  return uk;
}

}  // namespace kvad::train
