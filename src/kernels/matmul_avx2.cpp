// AVX2/FMA dense kernels: tiles of 4 weight rows x 2 tokens (8 accumulators of 8 floats), with a
// scalar tail for k not a multiple of 8. bf16 weights are widened to f32 on load (exact).
#include <immintrin.h>

#include "core/dtype.h"
#include "kernels/matmul.h"
#include "kernels/x86_helpers.h"

namespace kvad::kernels {

namespace {

struct F32Rows {
  const float* w;
  int64_t k;
  static constexpr int64_t kPerLine = 16;  // values in a 64-byte line
  const float* ptr(int64_t r, int64_t i) const { return w + r * k + i; }
  __m256 load(int64_t r, int64_t i) const { return _mm256_loadu_ps(w + r * k + i); }
  float at(int64_t r, int64_t i) const { return w[r * k + i]; }
};

struct Bf16Rows {
  const uint16_t* w;
  int64_t k;
  static constexpr int64_t kPerLine = 32;
  const uint16_t* ptr(int64_t r, int64_t i) const { return w + r * k + i; }
  __m256 load(int64_t r, int64_t i) const {
    __m128i h = _mm_loadu_si128((const __m128i*)(w + r * k + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  float at(int64_t r, int64_t i) const { return bf16_to_f32(w[r * k + i]); }
};

// Prefetch: the first pass of tokens over these rows, which reads them from memory; `ahead` rows on
// (tile_rows_ahead) each line is brought into L2 for the next tile, once a line.
template <int R, int T, bool Prefetch = false, typename Rows>
inline void tile(const Rows& W, const float* x, int64_t k, int64_t r0, int64_t t0, float* y, int64_t m, int64_t ahead = 0) {
  __m256 acc[R][T];
  #pragma GCC unroll 8
  for (int a = 0; a < R; a++)
    #pragma GCC unroll 8
    for (int b = 0; b < T; b++) acc[a][b] = _mm256_setzero_ps();
  auto step = [&](int64_t i) __attribute__((always_inline)) {
    __m256 xv[T];
    #pragma GCC unroll 8
    for (int b = 0; b < T; b++) xv[b] = _mm256_loadu_ps(x + (t0 + b) * k + i);
    #pragma GCC unroll 8
    for (int a = 0; a < R; a++) {
      __m256 wv = W.load(r0 + a, i);
      #pragma GCC unroll 8
      for (int b = 0; b < T; b++) acc[a][b] = _mm256_fmadd_ps(wv, xv[b], acc[a][b]);
    }
  };
  int64_t i = 0;
  if constexpr (Prefetch)
    for (; i + Rows::kPerLine <= k; i += Rows::kPerLine) {  // a line of each row a pass
      #pragma GCC unroll 8
      for (int a = 0; a < R; a++) prefetch_to_l2(W.ptr(r0 + a + ahead, i));
      #pragma GCC unroll 4
      for (int64_t j = 0; j < Rows::kPerLine; j += 8) step(i + j);
    }
  for (; i + 8 <= k; i += 8) step(i);
  #pragma GCC unroll 8
  for (int a = 0; a < R; a++)
    #pragma GCC unroll 8
    for (int b = 0; b < T; b++) {
      float s = hsum256(acc[a][b]);
      for (int64_t j = i; j < k; j++) s += W.at(r0 + a, j) * x[(t0 + b) * k + j];
      y[(t0 + b) * m + r0 + a] = s;
    }
}

// One group of T tokens over rows [b0, b1); `first`: the block's first pass, from memory.
template <int T, typename Rows>
void block_pass(const Rows& W, const float* x, int64_t k, int64_t m, int64_t b0, int64_t b1, int64_t t, float* y,
                bool first) {
  tile_block_pass(m, b0, b1, first, [&](auto rows, auto prefetch, int64_t r, int64_t ahead) {
    tile<decltype(rows)::value, T, decltype(prefetch)::value>(W, x, k, r, t, y, m, ahead);
  });
}

template <typename Rows>
void rows(const Rows& W, const float* x, int64_t n, int64_t k, int64_t m, int64_t rb, int64_t re, float* y) {
  // Blocks of 32 rows stay in cache while every group of tokens passes over them, so a long
  // prompt reads each weight from memory once, not once per token group.
  for (int64_t b0 = rb; b0 < re; b0 += 32) {
    int64_t b1 = b0 + 32 < re ? b0 + 32 : re;
    int64_t t = 0;
    for (; t + 2 <= n; t += 2) block_pass<2>(W, x, k, m, b0, b1, t, y, t == 0);
    for (; t < n; t++) block_pass<1>(W, x, k, m, b0, b1, t, y, t == 0);
  }
}

// Decode: one row at a time, one sequential stream with the quantised decodes' NTA prefetch 4 KB
// ahead, four accumulators so the FMA latency does not serialise the row (the tiles keep one per
// row and token, and no prefetch: docs/kernels.md, "bf16 decode").
constexpr int64_t kDecodeAhead = 4096;

template <typename Rows>
inline float row_dot(const Rows& W, int64_t r, const float* x, int64_t k) {
  constexpr int64_t bytes = sizeof(*W.w);  // of one value: 4 (f32) or 2 (bf16)
  const uint8_t* base = reinterpret_cast<const uint8_t*>(W.w + r * k);
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 32 <= k; i += 32) {
    // 32 values: 128 bytes of f32 (two lines) or 64 of bf16 (one)
    prefetch_weights(base + i * bytes + kDecodeAhead);
    if constexpr (bytes == 4) prefetch_weights(base + i * bytes + kDecodeAhead + 64);
    a0 = _mm256_fmadd_ps(W.load(r, i), _mm256_loadu_ps(x + i), a0);
    a1 = _mm256_fmadd_ps(W.load(r, i + 8), _mm256_loadu_ps(x + i + 8), a1);
    a2 = _mm256_fmadd_ps(W.load(r, i + 16), _mm256_loadu_ps(x + i + 16), a2);
    a3 = _mm256_fmadd_ps(W.load(r, i + 24), _mm256_loadu_ps(x + i + 24), a3);
  }
  for (; i + 8 <= k; i += 8) a0 = _mm256_fmadd_ps(W.load(r, i), _mm256_loadu_ps(x + i), a0);
  float s = hsum256(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  for (; i < k; i++) s += W.at(r, i) * x[i];
  return s;
}

}  // namespace

void rows_f32_avx2(const float* x, int64_t n, int64_t k, const void* w, int64_t m, int64_t rb, int64_t re, float* y) {
  const F32Rows W{static_cast<const float*>(w), k};
  if (n == 1) {
    for (int64_t r = rb; r < re; r++) y[r] = row_dot(W, r, x, k);
    return;
  }
  rows(W, x, n, k, m, rb, re, y);
}

void rows_bf16_avx2(const float* x, int64_t n, int64_t k, const void* w, int64_t m, int64_t rb, int64_t re, float* y) {
  const Bf16Rows W{static_cast<const uint16_t*>(w), k};
  if (n == 1) {
    for (int64_t r = rb; r < re; r++) y[r] = row_dot(W, r, x, k);
    return;
  }
  rows(W, x, n, k, m, rb, re, y);
}

}  // namespace kvad::kernels

namespace kvad::kernels {

namespace {

// x [n, k] times B [k, m]: T rows of x by NV vectors of 8 columns of B in registers (T x NV <= 12),
// one broadcast of x per row and one load of B per vector per step of k, as the AVX-512 file's
// tile_nn; `last` masks the final vector's columns.
template <int T, int NV>
inline void tile_nn(const float* x, int64_t k, const float* b, int64_t m, int64_t t0, int64_t j0, __m256i last, float* y) {
  __m256 acc[T][NV];
  #pragma GCC unroll 12
  for (int t = 0; t < T; t++)
    #pragma GCC unroll 2
    for (int v = 0; v < NV; v++) acc[t][v] = _mm256_setzero_ps();
  const __m256i all = _mm256_set1_epi32(-1);
  for (int64_t i = 0; i < k; i++) {
    __m256 bv[NV];
    #pragma GCC unroll 2
    for (int v = 0; v < NV; v++) bv[v] = _mm256_maskload_ps(b + i * m + j0 + 8 * v, v == NV - 1 ? last : all);
    #pragma GCC unroll 12
    for (int t = 0; t < T; t++) {
      const __m256 xv = _mm256_broadcast_ss(x + (t0 + t) * k + i);
      #pragma GCC unroll 2
      for (int v = 0; v < NV; v++) acc[t][v] = _mm256_fmadd_ps(xv, bv[v], acc[t][v]);
    }
  }
  #pragma GCC unroll 12
  for (int t = 0; t < T; t++)
    #pragma GCC unroll 2
    for (int v = 0; v < NV; v++) _mm256_maskstore_ps(y + (t0 + t) * m + j0 + 8 * v, v == NV - 1 ? last : all, acc[t][v]);
}

template <int T, int NV>
inline void rows_nn(const float* x, int64_t n, int64_t k, const float* b, int64_t m, int64_t j0, __m256i last, float* y) {
  int64_t t = 0;
  for (; t + T <= n; t += T) tile_nn<T, NV>(x, k, b, m, t, j0, last, y);
  for (; t < n; t++) tile_nn<1, NV>(x, k, b, m, t, j0, last, y);
}

}  // namespace

void matmul_nn_avx2(const float* x, int64_t n, int64_t k, const float* b, int64_t m, float* y) {
  for (int64_t j0 = 0; j0 < m; j0 += 16) {
    const int64_t w = m - j0 < 16 ? m - j0 : 16;
    if (w > 8) rows_nn<6, 2>(x, n, k, b, m, j0, lanes8(w - 8), y);
    else rows_nn<12, 1>(x, n, k, b, m, j0, lanes8(w), y);
  }
}

}  // namespace kvad::kernels
