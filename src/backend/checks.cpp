#include "backend/checks.h"

#include "core/error.h"

namespace kvad {

void need_shape(bool ok, const char* backend, const char* op, const Tensor& t, const char* what) {
  if (!ok) fail("{} backend {}: {} (tensor [{}, {}] stride {})", backend, op, what, t.rows, t.cols, t.stride);
}

void check_attention_shapes(const char* backend, const Batch& batch, const kernels::AttentionShape& s, const Tensor& q,
                            const Tensor& k, const Tensor& v, const Tensor& out) {
  const int64_t kvw = (int64_t)s.n_kv_heads * s.head_dim, qw = (int64_t)s.n_heads * s.head_dim;
  need_shape(q.rows == batch.size() && q.cols == qw, backend, "attention", q, "q is not [rows, heads * head_dim]");
  need_shape(k.rows == q.rows && k.cols == kvw && v.rows == q.rows && v.cols == kvw, backend, "attention", k,
             "k/v shape");
  need_shape(out.rows == q.rows && out.cols == qw, backend, "attention", out, "output shape");
}

}  // namespace kvad
