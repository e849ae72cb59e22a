// AVX-512 dense kernels: tiles of 4 weight rows x 4 tokens, 16 accumulators, k in steps of 16
// with a masked tail. bf16 weights are widened to f32 on load (exact), so the activations keep
// full precision; decode is bound by reading W, which bf16 halves.
//
// bf16 rows are read 32 at a time: one 64-byte load, then the even elements are the low halves of
// its 32-bit lanes shifted up and the odd ones the high halves masked, two cheap operations where
// widening 16 values at a time costs four. The activations are split the same way (evens then
// odds per 32) once per call, since every row multiplies the same ones.
#include <immintrin.h>

#include <vector>

#include "core/cpu.h"
#include "kernels/matmul.h"
#include "kernels/x86_helpers.h"

namespace kvad::kernels {

namespace {

struct F32Rows {
  const float* w;
  int64_t k;
  const float* at(int64_t r, int64_t i) const { return w + r * k + i; }
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

// Prefetch: the first pass of tokens over these rows, which reads them from memory; `ahead` rows on
// (tile_rows_ahead) each line is brought into L2 for the next tile.
template <int R, int T, bool Prefetch = false, typename Rows>
inline void tile(const Rows& W, const float* x, int64_t k, int64_t r0, int64_t t0, float* y, int64_t m, int64_t ahead = 0) {
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
      if constexpr (Prefetch) prefetch_to_l2(W.at(r0 + a + ahead, i));
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
    for (; t + 4 <= n; t += 4) block_pass<4>(W, x, k, m, b0, b1, t, y, t == 0);
    switch (n - t) {  // the last 1-3 tokens in one pass
      case 3: block_pass<3>(W, x, k, m, b0, b1, t, y, t == 0); break;
      case 2: block_pass<2>(W, x, k, m, b0, b1, t, y, t == 0); break;
      case 1: block_pass<1>(W, x, k, m, b0, b1, t, y, t == 0); break;
    }
  }
}

}  // namespace

// Decode reads every row once, in order: a software prefetch this far ahead, as the quantised
// decodes do (kernels/x86_helpers.h: with two threads the hardware prefetcher alone fell behind).
constexpr int64_t kDecodeAhead = 4096;

// Decode over f32 rows: as row_dot_bf16, one sequential stream.
inline float row_dot_f32(const float* p, const float* x, int64_t k) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 64 <= k; i += 64) {
#pragma GCC unroll 4
    for (int l = 0; l < 4; l++) prefetch_weights(reinterpret_cast<const uint8_t*>(p + i) + kDecodeAhead + 64 * l);
    a0 = _mm512_fmadd_ps(_mm512_loadu_ps(p + i), _mm512_loadu_ps(x + i), a0);
    a1 = _mm512_fmadd_ps(_mm512_loadu_ps(p + i + 16), _mm512_loadu_ps(x + i + 16), a1);
    a2 = _mm512_fmadd_ps(_mm512_loadu_ps(p + i + 32), _mm512_loadu_ps(x + i + 32), a2);
    a3 = _mm512_fmadd_ps(_mm512_loadu_ps(p + i + 48), _mm512_loadu_ps(x + i + 48), a3);
  }
  for (; i < k; i += 16) {
    __mmask16 m = k - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (k - i)) - 1);
    a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, p + i), _mm512_maskz_loadu_ps(m, x + i), a0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

void rows_f32_avx512(const float* x, int64_t n, int64_t k, const void* w, int64_t m, int64_t rb, int64_t re, float* y) {
  const float* W = static_cast<const float*>(w);
  if (n == 1) {
    for (int64_t r = rb; r < re; r++) y[r] = row_dot_f32(W + r * k, x, k);
    return;
  }
  rows(F32Rows{W, k}, x, n, k, m, rb, re, y);
}

// As `tile`, over bf16 rows split even/odd and xs arranged to match (rows_bf16_avx512).
template <int R, int T, bool Prefetch = false>
inline void tile_bf16(const uint16_t* w, const float* xs, int64_t k, int64_t kp, int64_t r0, int64_t t0, float* y,
                      int64_t m, int64_t ahead = 0) {
  __m512 acc[R][T];
#pragma GCC unroll 8
  for (int a = 0; a < R; a++)
#pragma GCC unroll 8
    for (int b = 0; b < T; b++) acc[a][b] = _mm512_setzero_ps();
  const __m512i hi = _mm512_set1_epi32((int)0xFFFF0000u);
  for (int64_t i = 0; i < kp; i += 32) {
    __m512 xe[T], xo[T];
#pragma GCC unroll 8
    for (int b = 0; b < T; b++) {
      xe[b] = _mm512_loadu_ps(xs + (t0 + b) * kp + i);
      xo[b] = _mm512_loadu_ps(xs + (t0 + b) * kp + i + 16);
    }
#pragma GCC unroll 8
    for (int a = 0; a < R; a++) {
      const uint16_t* p = w + (r0 + a) * k + i;
      if constexpr (Prefetch) prefetch_to_l2(p + ahead * k);
      __m512i v = i + 32 <= k ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi16((__mmask32)((1ull << (k - i)) - 1), p);
      __m512 we = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)), wo = _mm512_castsi512_ps(_mm512_and_si512(v, hi));
#pragma GCC unroll 8
      for (int b = 0; b < T; b++) acc[a][b] = _mm512_fmadd_ps(wo, xo[b], _mm512_fmadd_ps(we, xe[b], acc[a][b]));
    }
  }
#pragma GCC unroll 8
  for (int a = 0; a < R; a++)
#pragma GCC unroll 8
    for (int b = 0; b < T; b++) y[(t0 + b) * m + r0 + a] = _mm512_reduce_add_ps(acc[a][b]);
}

// As block_pass, for tile_bf16.
template <int T>
void block_pass_bf16(const uint16_t* w, const float* xs, int64_t k, int64_t kp, int64_t m, int64_t b0, int64_t b1,
                     int64_t t, float* y, bool first) {
  tile_block_pass(m, b0, b1, first, [&](auto rows, auto prefetch, int64_t r, int64_t ahead) {
    tile_bf16<decltype(rows)::value, T, decltype(prefetch)::value>(w, xs, k, kp, r, t, y, m, ahead);
  });
}

// Decode: one row at a time, so the whole matrix is one sequential stream, prefetched ahead, with
// four accumulators so the FMA latency does not serialise the row. The bf16 values are widened 16
// at a time against x as it is: the tiles' even/odd split (one 64-byte load for 32 values, x
// rearranged to match) read a decode's weights at 37 GB/s where this reads 48-57 (kvad_micro
// BM_bf16_decode, 128 MB, two threads; docs/kernels.md, "bf16 decode"). On Zen 4 the software
// prefetch costs more than it brings: end to end 20-24 tok/s with it, 25-41 without, in six
// interleaved rounds (docs/kernels.md, "Zen 4 again"); the hardware prefetcher follows the stream.
template <bool Prefetch>
inline float row_dot_bf16(const uint16_t* p, const float* x, int64_t k) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 64 <= k; i += 64) {
    if constexpr (Prefetch) {
      prefetch_weights(reinterpret_cast<const uint8_t*>(p + i) + kDecodeAhead);
      prefetch_weights(reinterpret_cast<const uint8_t*>(p + i) + kDecodeAhead + 64);
    }
    a0 = _mm512_fmadd_ps(Bf16Rows::widen(_mm256_loadu_si256((const __m256i*)(p + i))), _mm512_loadu_ps(x + i), a0);
    a1 = _mm512_fmadd_ps(Bf16Rows::widen(_mm256_loadu_si256((const __m256i*)(p + i + 16))), _mm512_loadu_ps(x + i + 16), a1);
    a2 = _mm512_fmadd_ps(Bf16Rows::widen(_mm256_loadu_si256((const __m256i*)(p + i + 32))), _mm512_loadu_ps(x + i + 32), a2);
    a3 = _mm512_fmadd_ps(Bf16Rows::widen(_mm256_loadu_si256((const __m256i*)(p + i + 48))), _mm512_loadu_ps(x + i + 48), a3);
  }
  for (; i < k; i += 16) {
    __mmask16 m = k - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (k - i)) - 1);
    a0 = _mm512_fmadd_ps(Bf16Rows::widen(_mm256_maskz_loadu_epi16(m, p + i)), _mm512_maskz_loadu_ps(m, x + i), a0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

void rows_bf16_avx512(const float* x, int64_t n, int64_t k, const void* wv, int64_t m, int64_t rb, int64_t re, float* y) {
  const uint16_t* w = static_cast<const uint16_t*>(wv);
  if (n == 1) {
    static const bool prefetch = !cpu_features().zen4;
    if (prefetch)
      for (int64_t r = rb; r < re; r++) y[r] = row_dot_bf16<true>(w + r * k, x, k);
    else
      for (int64_t r = rb; r < re; r++) y[r] = row_dot_bf16<false>(w + r * k, x, k);
    return;
  }
  const int64_t kp = (k + 31) / 32 * 32;
  thread_local std::vector<float> xs;
  xs.assign((size_t)(n * kp), 0.0f);
  for (int64_t t = 0; t < n; t++)
    for (int64_t i = 0; i < k; i++) xs[(size_t)(t * kp + i / 32 * 32 + (i % 2) * 16 + (i % 32) / 2)] = x[t * k + i];
  for (int64_t b0 = rb; b0 < re; b0 += 32) {
    int64_t b1 = b0 + 32 < re ? b0 + 32 : re, t = 0;
    for (; t + 4 <= n; t += 4) block_pass_bf16<4>(w, xs.data(), k, kp, m, b0, b1, t, y, t == 0);
    switch (n - t) {  // the last 1-3 tokens in one pass
      case 3: block_pass_bf16<3>(w, xs.data(), k, kp, m, b0, b1, t, y, t == 0); break;
      case 2: block_pass_bf16<2>(w, xs.data(), k, kp, m, b0, b1, t, y, t == 0); break;
      case 1: block_pass_bf16<1>(w, xs.data(), k, kp, m, b0, b1, t, y, t == 0); break;
    }
  }
}

// x [n, k] times B [k, m]: T rows of x by NV vectors of 16 columns of B in registers (T x NV <= 24),
// one broadcast of x per row and one load of B per vector per step of k; no horizontal sums. A
// 64-column block takes 6 rows at a time; a head-wide block (40 columns: attention's p V) 8.
template <int T, int NV>
inline void tile_nn(const float* x, int64_t k, const float* b, int64_t m, int64_t t0, int64_t j0, __mmask16 last,
                    float* y) {
  __m512 acc[T][NV];
#pragma GCC unroll 12
  for (int t = 0; t < T; t++)
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) acc[t][v] = _mm512_setzero_ps();
  for (int64_t i = 0; i < k; i++) {
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) bv[v] = _mm512_maskz_loadu_ps(v == NV - 1 ? last : (__mmask16)0xFFFF, b + i * m + j0 + 16 * v);
#pragma GCC unroll 12
    for (int t = 0; t < T; t++) {
      __m512 xv = _mm512_set1_ps(x[(t0 + t) * k + i]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; v++) acc[t][v] = _mm512_fmadd_ps(xv, bv[v], acc[t][v]);
    }
  }
#pragma GCC unroll 12
  for (int t = 0; t < T; t++)
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++)
      _mm512_mask_storeu_ps(y + (t0 + t) * m + j0 + 16 * v, v == NV - 1 ? last : (__mmask16)0xFFFF, acc[t][v]);
}

template <int T, int NV>
inline void rows_nn(const float* x, int64_t n, int64_t k, const float* b, int64_t m, int64_t j0, __mmask16 last, float* y) {
  int64_t t = 0;
  for (; t + T <= n; t += T) tile_nn<T, NV>(x, k, b, m, t, j0, last, y);
  for (; t < n; t++) tile_nn<1, NV>(x, k, b, m, t, j0, last, y);
}

void matmul_nn_avx512(const float* x, int64_t n, int64_t k, const float* b, int64_t m, float* y) {
  for (int64_t j0 = 0; j0 < m; j0 += 64) {
    const int64_t w = m - j0 < 64 ? m - j0 : 64;
    const int nv = (int)((w + 15) / 16);
    const int64_t rem = w - 16 * (nv - 1);
    const __mmask16 last = (__mmask16)(rem >= 16 ? 0xFFFF : (1u << rem) - 1);
    switch (nv) {
      case 4: rows_nn<6, 4>(x, n, k, b, m, j0, last, y); break;
      case 3: rows_nn<8, 3>(x, n, k, b, m, j0, last, y); break;
      case 2: rows_nn<12, 2>(x, n, k, b, m, j0, last, y); break;
      default: rows_nn<12, 1>(x, n, k, b, m, j0, last, y); break;
    }
  }
}

}  // namespace kvad::kernels
