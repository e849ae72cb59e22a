// AVX-512 dense kernels: tiles of 4 weight rows x 4 tokens, 16 accumulators, k in steps of 16
// with a masked tail. bf16 weights are widened to f32 on load (exact), so the activations keep
// full precision; decode is bound by reading W, which bf16 halves.
#include <immintrin.h>

#include "kernels/matmul.h"

namespace kvad::kernels {

namespace {

struct F32Rows {
  const float* w;
  int64_t k;
  __m512 load(int64_t r, int64_t i) const { return _mm512_loadu_ps(w + r * k + i); }
  __m512 load_mask(int64_t r, int64_t i, __mmask16 m) const { return _mm512_maskz_loadu_ps(m, w + r * k + i); }
};

struct Bf16Rows {
  const uint16_t* w;
  int64_t k;
  static __m512 widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
  __m512 load(int64_t r, int64_t i) const { return widen(_mm256_loadu_si256((const __m256i*)(w + r * k + i))); }
  __m512 load_mask(int64_t r, int64_t i, __mmask16 m) const {
    return widen(_mm256_maskz_loadu_epi16(m, w + r * k + i));
  }
};

template <int R, int T, typename Rows>
inline void tile(const Rows& W, const float* x, int64_t k, int64_t r0, int64_t t0, float* y, int64_t m) {
  __m512 acc[R][T];
  #pragma GCC unroll 8
  for (int a = 0; a < R; a++)
    #pragma GCC unroll 8
    for (int b = 0; b < T; b++) acc[a][b] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= k; i += 16) {
    __m512 xv[T];
    #pragma GCC unroll 8
    for (int b = 0; b < T; b++) xv[b] = _mm512_loadu_ps(x + (t0 + b) * k + i);
    #pragma GCC unroll 8
    for (int a = 0; a < R; a++) {
      __m512 wv = W.load(r0 + a, i);
      #pragma GCC unroll 8
      for (int b = 0; b < T; b++) acc[a][b] = _mm512_fmadd_ps(wv, xv[b], acc[a][b]);
    }
  }
  if (i < k) {
    __mmask16 mask = (__mmask16)((1u << (k - i)) - 1);
    __m512 xv[T];
    #pragma GCC unroll 8
    for (int b = 0; b < T; b++) xv[b] = _mm512_maskz_loadu_ps(mask, x + (t0 + b) * k + i);
    #pragma GCC unroll 8
    for (int a = 0; a < R; a++) {
      __m512 wv = W.load_mask(r0 + a, i, mask);
      #pragma GCC unroll 8
      for (int b = 0; b < T; b++) acc[a][b] = _mm512_fmadd_ps(wv, xv[b], acc[a][b]);
    }
  }
  #pragma GCC unroll 8
  for (int a = 0; a < R; a++)
    #pragma GCC unroll 8
    for (int b = 0; b < T; b++) y[(t0 + b) * m + r0 + a] = _mm512_reduce_add_ps(acc[a][b]);
}

template <typename Rows>
void rows(const Rows& W, const float* x, int64_t n, int64_t k, int64_t m, int64_t rb, int64_t re, float* y) {
  // Blocks of 32 rows stay in cache while every group of tokens passes over them, so a long
  // prompt reads each weight from memory once, not once per token group.
  for (int64_t b0 = rb; b0 < re; b0 += 32) {
    int64_t b1 = b0 + 32 < re ? b0 + 32 : re;
    int64_t t = 0;
    for (; t + 4 <= n; t += 4) {
      int64_t r = b0;
      for (; r + 4 <= b1; r += 4) tile<4, 4>(W, x, k, r, t, y, m);
      for (; r < b1; r++) tile<1, 4>(W, x, k, r, t, y, m);
    }
    for (; t < n; t++) {
      int64_t r = b0;
      for (; r + 4 <= b1; r += 4) tile<4, 1>(W, x, k, r, t, y, m);
      for (; r < b1; r++) tile<1, 1>(W, x, k, r, t, y, m);
    }
  }
}

}  // namespace

void rows_f32_avx512(const float* x, int64_t n, int64_t k, const void* w, int64_t m, int64_t rb, int64_t re, float* y) {
  rows(F32Rows{static_cast<const float*>(w), k}, x, n, k, m, rb, re, y);
}

void rows_bf16_avx512(const float* x, int64_t n, int64_t k, const void* w, int64_t m, int64_t rb, int64_t re, float* y) {
  rows(Bf16Rows{static_cast<const uint16_t*>(w), k}, x, n, k, m, rb, re, y);
}

}  // namespace kvad::kernels
