// Causal self-attention over a KV cache, grouped by KV head: the query heads that share a KV head
// are processed together, so each cached key and value is read once per group, not once per head.
#pragma once
#include <cstdint>

#include "core/cpu.h"

namespace kvad::kernels {

struct AttentionShape {
  int n_heads;     // query heads
  int n_kv_heads;  // key/value heads (n_heads % n_kv_heads == 0)
  int head_dim;
  float scale;     // usually 1/sqrt(head_dim)
};

// q:   [n, n_heads * head_dim], query rows for positions pos0 .. pos0+n-1
// k,v: the cache, per KV head a block of `head_stride` floats holding [position][head_dim]
//      for positions 0 .. pos0+n-1 (the new tokens' keys already written)
// out: [n, n_heads * head_dim]
// Each query at position p attends to positions 0..p (the causal mask).
void attention(const float* q, int64_t n, int64_t pos0, const AttentionShape& s, const float* k, const float* v,
               int64_t head_stride, float* out, Isa isa = best_isa());

}  // namespace kvad::kernels
