// Shape checks every backend makes before an operation, so that a mistake in an architecture file
// is the same error, naming the backend and the operation, whichever backend runs it.
#pragma once
#include "backend/batch.h"
#include "backend/tensor.h"
#include "kernels/attention.h"

namespace kvad {

// Throws "<backend> backend <op>: <what> (tensor [r, c] stride s)" unless ok.
void need_shape(bool ok, const char* backend, const char* op, const Tensor& t, const char* what);
// attention(): q [rows, heads * head_dim], k and v [rows, kv_heads * head_dim], out as q.
void check_attention_shapes(const char* backend, const Batch& batch, const kernels::AttentionShape& s, const Tensor& q,
                            const Tensor& k, const Tensor& v, const Tensor& out);

}  // namespace kvad
