// Multi-head latent attention (DeepSeek V2/V3's MLA), absorbed: the cache holds one row per
// position, [c: the normed latent (kv_rank) | k_pe: the rotated key shared by all heads (rope_dim)],
// and kv_b_proj ([heads * (nope + v), kv_rank]) is never applied to the cached rows. Per query
// head h, with W_UK_h = kv_b's rows h*(nope+v) .. +nope and W_UV_h its next v rows:
//   q_abs_h = q_nope_h W_UK_h                  absorb_queries: [kv_rank]
//   score_t = q_abs_h . c_t + q_pe_h . k_pe_t  attention_paged over rows [q_abs | q_pe], one KV head
//   u_h     = sum_t softmax(scale * score)_t c_t   (the values: each row's first kv_rank columns)
//   out_h   = W_UV_h u_h                       expand_values: [v]
// which equals the naive form's attention over k_h = [W_UK_h c | k_pe] and v_h = W_UV_h c, while
// a position costs kv_rank + rope_dim values instead of heads * (nope + rope + v).
#pragma once
#include <cstdint>

#include "core/cpu.h"
#include "kernels/attention.h"

namespace kvad::kernels {

struct LatentShape {
  int n_heads, nope_dim, rope_dim, kv_rank, v_dim;
  float scale;  // of the scores (DeepSeek: (nope + rope)^-0.5 times YaRN's mscale^2)

  int latent_width() const { return kv_rank + rope_dim; }
  int query_width() const { return nope_dim + rope_dim; }  // of a head of q: [q_nope | q_pe]
  // The attention over the cached rows: every query head on one KV head, values the latent.
  AttentionShape attention() const {
    AttentionShape s{n_heads, 1, latent_width(), scale};
    s.value_dim = kv_rank;
    return s;
  }
};

// q:  [n, n_heads * query_width()] (row stride q_stride), q_pe already rotated
// qa: [n, n_heads * latent_width()]: per head [q_nope_h W_UK_h | q_pe_h]
void absorb_queries(const float* q, int64_t q_stride, int64_t n, const LatentShape& s, const float* kv_b, float* qa,
                    int64_t qa_stride, Isa isa = best_isa());
// u:   [n, n_heads * kv_rank] (attention_paged's output)
// out: [n, n_heads * v_dim]: per head W_UV_h u_h
void expand_values(const float* u, int64_t u_stride, int64_t n, const LatentShape& s, const float* kv_b, float* out,
                   int64_t out_stride, Isa isa = best_isa());

}  // namespace kvad::kernels
