// The attention loop, written once over a small SIMD trait (dot, axpy, scale) and instantiated per
// ISA in attention*.cpp. Included only by those files.
#pragma once
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

}  // namespace kvad::kernels::detail
