// AVX2/FMA micro-kernel: 6 rows x 16 columns of C in 12 ymm accumulators; per k, two loads of B
// and six broadcasts of A feed 12 FMAs. Edge tiles go through a small buffer.
#include <immintrin.h>

#include "train/gemm.h"

namespace kvad::train {

namespace {

constexpr int MR = 6, NR = 16;

void ukernel(int64_t kc, const float* A, const float* B, float* C, int64_t ldc, int mr, int nr, bool add_c,
             const float* bias) {
  __m256 c[MR][2];
#pragma GCC unroll 6
  for (int i = 0; i < MR; i++) c[i][0] = c[i][1] = _mm256_setzero_ps();
  for (int64_t k = 0; k < kc; k++, A += MR, B += NR) {
    __m256 b0 = _mm256_load_ps(B), b1 = _mm256_load_ps(B + 8);
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++) {
      __m256 a = _mm256_broadcast_ss(A + i);
      c[i][0] = _mm256_fmadd_ps(a, b0, c[i][0]);
      c[i][1] = _mm256_fmadd_ps(a, b1, c[i][1]);
    }
  }
  if (mr == MR && nr == NR) {
    __m256 bias0 = bias ? _mm256_loadu_ps(bias) : _mm256_setzero_ps();
    __m256 bias1 = bias ? _mm256_loadu_ps(bias + 8) : _mm256_setzero_ps();
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++) {
      float* row = C + i * ldc;
      __m256 v0 = _mm256_add_ps(c[i][0], bias0), v1 = _mm256_add_ps(c[i][1], bias1);
      if (add_c) v0 = _mm256_add_ps(_mm256_loadu_ps(row), v0), v1 = _mm256_add_ps(_mm256_loadu_ps(row + 8), v1);
      _mm256_storeu_ps(row, v0);
      _mm256_storeu_ps(row + 8, v1);
    }
    return;
  }
  alignas(32) float tile[MR][NR];
  for (int i = 0; i < MR; i++) _mm256_store_ps(tile[i], c[i][0]), _mm256_store_ps(tile[i] + 8, c[i][1]);
  for (int i = 0; i < mr; i++)
    for (int j = 0; j < nr; j++) {
      float v = tile[i][j] + (bias ? bias[j] : 0.0f);
      C[i * ldc + j] = add_c ? C[i * ldc + j] + v : v;
    }
}

}  // namespace

MicroKernel micro_kernel_avx2() { return {MR, NR, ukernel, nullptr, nullptr}; }

}  // namespace kvad::train
