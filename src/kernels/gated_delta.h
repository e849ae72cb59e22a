// The gated DeltaNet mixer of Qwen3-Next's linear-attention layers, over the rows of a batch, each
// span of rows one sequence continuing from its recurrent state:
//   mixed = silu(causal depthwise conv_K(q | k | v))        (the state keeps the last K-1 inputs)
//   q, k  = l2norm per key head (q also x key_dim^-0.5), shared by value_heads / key_heads value heads
//   per value head: S = exp(g) S;  S += k (beta (v - S^T k))^T;  o = S^T q          (S: [key_dim, value_dim])
//     with g = A softplus(a + dt_bias) (A = -exp(A_log) < 0: a decay), beta = sigmoid(b)
//   out = rmsnorm(o) * norm * silu(z)                        (per value head)
// The projections arrive as transformers' in_proj_qkvz / in_proj_ba compute them, grouped by key
// head: per key head [q (key_dim) | k (key_dim) | v (r x value_dim) | z (r x value_dim)] and
// [b (r) | a (r)], r = value_heads / key_heads. The conv's channels are ordered [all q | all k | all v].
// The recurrence is the token-by-token form of the reference (transformers'
// torch_recurrent_gated_delta_rule, ../shared/peer/ref_forward.py); a snapshot of the state (conv
// window and every S) is copied out after each position that ends a block which has a snapshot slot.
#pragma once
#include <cstdint>

#include "core/cpu.h"

namespace kvad::kernels {

constexpr int kMaxDeltaValueDim = 1024;  // the kernel keeps a few rows of value_dim on the stack

struct DeltaNetShape {
  int key_heads = 0, value_heads = 0, key_dim = 0, value_dim = 0, conv_kernel = 0;
  float norm_eps = 1e-6f;

  int64_t ratio() const { return value_heads / key_heads; }
  int64_t conv_channels() const { return 2 * (int64_t)key_heads * key_dim + (int64_t)value_heads * value_dim; }
  int64_t qkvz_width() const { return conv_channels() + (int64_t)value_heads * value_dim; }
  int64_t ba_width() const { return 2 * (int64_t)value_heads; }
  int64_t out_width() const { return (int64_t)value_heads * value_dim; }
  int64_t conv_state_floats() const { return (int64_t)(conv_kernel - 1) * conv_channels(); }
  // One sequence's state: the conv window [K-1, channels], then S per value head [key_dim, value_dim].
  int64_t state_floats() const { return conv_state_floats() + (int64_t)value_heads * key_dim * value_dim; }
};

struct DeltaNetWeights {
  const float* conv = nullptr;     // [channels, conv_kernel]
  const float* decay = nullptr;    // A = -exp(A_log) [value_heads]
  const float* dt_bias = nullptr;  // [value_heads]
  const float* norm = nullptr;     // [value_dim]
};

// One sequence's rows: rows row0 .. row0 + n - 1 at positions pos0 ...
struct DeltaNetSpan {
  int64_t row0 = 0, n = 0, pos0 = 0;
  float* state = nullptr;  // its working state (state_floats), read and advanced
  // Snapshots: after position p with (p + 1) % block_size == 0, the state is copied to
  // snapshot_base + slot x state_floats where slot = snapshot_of_block[blocks[(p + 1) / block_size - 1]]
  // when that is >= 0. snapshot_of_block null: none.
  const int32_t* blocks = nullptr;
  const int32_t* snapshot_of_block = nullptr;
  int64_t block_size = 0;
  float* snapshot_base = nullptr;
};

// qkvz [rows, qkvz_width], ba [rows, ba_width] (row strides given), out [rows, out_width].
// scratch: rows x conv_channels floats. The spans must not share rows. A prefill's rows run on the
// pool (the conv by channel ranges, the recurrence by value head); isa picks the row loops
// (gated_delta_<isa>.cpp, each checked against the scalar ones).
void gated_delta_net(const float* qkvz, int64_t qkvz_stride, const float* ba, int64_t ba_stride,
                     const DeltaNetSpan* spans, int64_t n_spans, const DeltaNetShape& shape, const DeltaNetWeights& w,
                     float* scratch, float* out, int64_t out_stride, Isa isa = best_isa());

}  // namespace kvad::kernels
