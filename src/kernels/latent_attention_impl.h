// The per-head loops of multi-head latent attention (kernels/latent_attention.h), written once over
// the attention kernels' SIMD trait (dot, axpy) and instantiated per ISA: scalar in
// latent_attention.cpp, AVX2 / AVX-512 in attention_<isa>.cpp beside their traits.
#pragma once
#include <algorithm>
#include <cstdint>

#include "kernels/latent_attention.h"

namespace kvad::kernels::detail {

// kv_b_proj's rows of head h: W_UK_h (nope_dim rows), then W_UV_h (v_dim rows), each kv_rank wide.
inline const float* uk_rows(const float* kv_b, const LatentShape& s, int h) {
  return kv_b + (int64_t)h * (s.nope_dim + s.v_dim) * s.kv_rank;
}
inline const float* uv_rows(const float* kv_b, const LatentShape& s, int h) {
  return uk_rows(kv_b, s, h) + (int64_t)s.nope_dim * s.kv_rank;
}

// Head h of every row: qa_h = [sum_d q_nope[d] W_UK_h[d] | q_pe] (W_UK_h's rows in their stored
// order, so each is one axpy over kv_rank floats).
template <typename V>
void absorb_head(const float* q, int64_t q_stride, int64_t n, const LatentShape& s, const float* kv_b, int h,
                 float* qa, int64_t qa_stride) {
  const float* w = uk_rows(kv_b, s, h);
  for (int64_t t = 0; t < n; t++) {
    const float* qh = q + t * q_stride + (int64_t)h * s.query_width();
    float* y = qa + t * qa_stride + (int64_t)h * s.latent_width();
    std::fill(y, y + s.kv_rank, 0.0f);
    for (int d = 0; d < s.nope_dim; d++) V::axpy(y, qh[d], w + (int64_t)d * s.kv_rank, s.kv_rank);
    std::copy_n(qh + s.nope_dim, s.rope_dim, y + s.kv_rank);
  }
}

// Head h of every row: out_h[e] = W_UV_h[e] . u_h.
template <typename V>
void expand_head(const float* u, int64_t u_stride, int64_t n, const LatentShape& s, const float* kv_b, int h,
                 float* out, int64_t out_stride) {
  const float* w = uv_rows(kv_b, s, h);
  for (int64_t t = 0; t < n; t++) {
    const float* uh = u + t * u_stride + (int64_t)h * s.kv_rank;
    float* o = out + t * out_stride + (int64_t)h * s.v_dim;
    for (int e = 0; e < s.v_dim; e++) o[e] = V::dot(w + (int64_t)e * s.kv_rank, uh, s.kv_rank);
  }
}

}  // namespace kvad::kernels::detail
