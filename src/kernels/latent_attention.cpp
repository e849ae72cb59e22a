#include "kernels/latent_attention.h"

#include <algorithm>

#include "core/threads.h"

namespace kvad::kernels {

namespace {
// kv_b_proj's rows of head h: W_UK_h (nope_dim rows), then W_UV_h (v_dim rows), each kv_rank wide.
const float* uk_rows(const float* kv_b, const LatentShape& s, int h) {
  return kv_b + (int64_t)h * (s.nope_dim + s.v_dim) * s.kv_rank;
}
const float* uv_rows(const float* kv_b, const LatentShape& s, int h) {
  return uk_rows(kv_b, s, h) + (int64_t)s.nope_dim * s.kv_rank;
}
}  // namespace

// One item per head, all rows inside it: a head's W_UK_h stays in cache across the rows of a prefill.
void absorb_queries(const float* q, int64_t q_stride, int64_t n, const LatentShape& s, const float* kv_b, float* qa,
                    int64_t qa_stride) {
  const int qw = s.query_width(), lw = s.latent_width(), r = s.kv_rank;
  pool().parallel_for(s.n_heads, 1, [&](int64_t h0, int64_t h1) {
    for (int h = (int)h0; h < (int)h1; h++) {
      const float* w = uk_rows(kv_b, s, h);
      for (int64_t t = 0; t < n; t++) {
        const float* qh = q + t * q_stride + (int64_t)h * qw;
        float* y = qa + t * qa_stride + (int64_t)h * lw;
        std::fill(y, y + r, 0.0f);
        for (int d = 0; d < s.nope_dim; d++) {  // y += q_nope[d] * W_UK_h[d]: rows in their stored order
          const float a = qh[d], *row = w + (int64_t)d * r;
          for (int c = 0; c < r; c++) y[c] += a * row[c];
        }
        std::copy_n(qh + s.nope_dim, s.rope_dim, y + r);
      }
    }
  });
}

void expand_values(const float* u, int64_t u_stride, int64_t n, const LatentShape& s, const float* kv_b, float* out,
                   int64_t out_stride) {
  const int r = s.kv_rank;
  pool().parallel_for(s.n_heads, 1, [&](int64_t h0, int64_t h1) {
    for (int h = (int)h0; h < (int)h1; h++) {
      const float* w = uv_rows(kv_b, s, h);
      for (int64_t t = 0; t < n; t++) {
        const float* uh = u + t * u_stride + (int64_t)h * r;
        float* o = out + t * out_stride + (int64_t)h * s.v_dim;
        for (int e = 0; e < s.v_dim; e++) {
          const float* row = w + (int64_t)e * r;
          float acc = 0;
          for (int c = 0; c < r; c++) acc += row[c] * uh[c];
          o[e] = acc;
        }
      }
    }
  });
}

}  // namespace kvad::kernels
