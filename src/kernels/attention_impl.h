// The attention loops, written once over a small SIMD trait and instantiated per ISA in
// attention*.cpp. Included only by those files.
//   decode (few queries): per KV head, one pass over the cached keys computes the scores of all
//     the query heads that share it (dot), one pass over the values accumulates them (axpy).
//   prefill (many queries): per KV head and chunk of queries, S = Q K^T and O = softmax(S) V as
//     register-blocked matrix products (gemm_nn), causal mask applied to S. A dot product per
//     score spends most of its time in the horizontal sum; the products amortise it away.
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/threads.h"
#include "kernels/attention.h"

namespace kvad::kernels::detail {

template <typename V>
void attention_impl(const float* q, int64_t n, int64_t pos0, const AttentionShape& s, const float* k,
                    const float* v, int64_t head_stride, float* out) {
  const int G = s.n_heads / s.n_kv_heads, hd = s.head_dim;
  const int64_t q_stride = (int64_t)s.n_heads * hd;
  const int64_t items = (int64_t)s.n_kv_heads * n;
  pool().parallel_for(items, 1, [&](int64_t b, int64_t e) {
    std::vector<float> scores;
    for (int64_t it = b; it < e; it++) {
      int64_t h = it % s.n_kv_heads, t = it / s.n_kv_heads;
      int64_t len = pos0 + t + 1;  // causal: keys 0..p
      scores.resize((size_t)(G * len));
      const float* kh = k + h * head_stride;
      const float* vh = v + h * head_stride;
      const float* qg = q + t * q_stride + h * G * hd;
      // Scores for all G heads from one pass over the keys.
      for (int64_t j = 0; j < len; j++) {
        const float* kj = kh + j * hd;
        for (int g = 0; g < G; g++) scores[(size_t)(g * len + j)] = V::dot(qg + g * hd, kj, hd) * s.scale;
      }
      for (int g = 0; g < G; g++) {
        float* sg = scores.data() + g * len;
        float mx = -INFINITY;
        for (int64_t j = 0; j < len; j++) mx = sg[j] > mx ? sg[j] : mx;
        float sum = 0;
        for (int64_t j = 0; j < len; j++) {
          sg[j] = std::exp(sg[j] - mx);
          sum += sg[j];
        }
        float inv = 1.0f / sum;
        for (int64_t j = 0; j < len; j++) sg[j] *= inv;
      }
      float* og = out + t * q_stride + h * G * hd;
      for (int i = 0; i < G * hd; i++) og[i] = 0;
      // Weighted values, again one pass over the cache for the whole group.
      for (int64_t j = 0; j < len; j++) {
        const float* vj = vh + j * hd;
        for (int g = 0; g < G; g++) V::axpy(og + g * hd, scores[(size_t)(g * len + j)], vj, hd);
      }
    }
  });
}

// C[M, N] = A[M, K] * B[K, N], all row-major with leading dimensions: 4-row x 2-vector tiles of
// accumulators, B streamed one row at a time and each A element broadcast.
template <typename V, int R>
inline void gemm_tile(const float* A, int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc, int64_t K,
                      int64_t j0, int64_t nj) {
  using reg = typename V::reg;
  reg acc[R][2];
#pragma GCC unroll 4
  for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = V::zero();
  const int64_t w = V::W, n0 = nj < w ? nj : w, n1 = nj - n0;
  for (int64_t kk = 0; kk < K; kk++) {
    const float* b = B + kk * ldb + j0;
    reg b0 = V::load(b, n0), b1 = n1 > 0 ? V::load(b + w, n1) : V::zero();
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
      reg a = V::set1(A[r * lda + kk]);
      acc[r][0] = V::fmadd(a, b0, acc[r][0]);
      acc[r][1] = V::fmadd(a, b1, acc[r][1]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; r++) {
    V::store(C + r * ldc + j0, acc[r][0], n0);
    if (n1 > 0) V::store(C + r * ldc + j0 + w, acc[r][1], n1);
  }
}

template <typename V>
void gemm_nn(const float* A, int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc, int64_t M, int64_t N,
             int64_t K) {
  const int64_t strip = 2 * V::W;
  for (int64_t j = 0; j < N; j += strip) {
    int64_t nj = N - j < strip ? N - j : strip, i = 0;
    for (; i + 4 <= M; i += 4) gemm_tile<V, 4>(A + i * lda, lda, B, ldb, C + i * ldc, ldc, K, j, nj);
    for (; i < M; i++) gemm_tile<V, 1>(A + i * lda, lda, B, ldb, C + i * ldc, ldc, K, j, nj);
  }
}

template <typename V>
void attention_prefill_impl(const float* q, int64_t n, int64_t pos0, const AttentionShape& s, const float* k,
                            const float* v, int64_t head_stride, float* out) {
  const int G = s.n_heads / s.n_kv_heads, hd = s.head_dim;
  const int64_t q_stride = (int64_t)s.n_heads * hd;
  const int64_t chunk = 64;  // queries per work item: S stays within a few hundred KB
  const int64_t chunks = (n + chunk - 1) / chunk, items = (int64_t)s.n_kv_heads * chunks;
  pool().parallel_for(items, 1, [&](int64_t b, int64_t e) {
    std::vector<float> qa, kt, sc, o;
    for (int64_t it = b; it < e; it++) {
      int64_t h = it / chunks, t0 = (it % chunks) * chunk, t1 = std::min(n, t0 + chunk);
      int64_t rows = (t1 - t0) * G, L = pos0 + t1;  // keys the last query of the chunk sees
      const float* kh = k + h * head_stride;
      const float* vh = v + h * head_stride;
      qa.resize((size_t)(rows * hd));
      for (int64_t t = t0; t < t1; t++)
        for (int g = 0; g < G; g++)
          std::copy_n(q + t * q_stride + (h * G + g) * hd, hd, qa.data() + ((t - t0) * G + g) * hd);
      kt.resize((size_t)(hd * L));
      for (int64_t j = 0; j < L; j++)
        for (int d = 0; d < hd; d++) kt[(size_t)(d * L + j)] = kh[j * hd + d];
      sc.resize((size_t)(rows * L));
      gemm_nn<V>(qa.data(), hd, kt.data(), L, sc.data(), L, rows, L, hd);
      for (int64_t r = 0; r < rows; r++) {
        int64_t valid = pos0 + t0 + r / G + 1;  // causal: keys 0 .. position of this query
        float* row = sc.data() + r * L;
        V::softmax(row, valid, s.scale);
        std::fill(row + valid, row + L, 0.0f);
      }
      o.resize((size_t)(rows * hd));
      gemm_nn<V>(sc.data(), L, vh, hd, o.data(), hd, rows, hd, L);
      for (int64_t t = t0; t < t1; t++)
        for (int g = 0; g < G; g++)
          std::copy_n(o.data() + ((t - t0) * G + g) * hd, hd, out + t * q_stride + (h * G + g) * hd);
    }
  });
}

}  // namespace kvad::kernels::detail
