// Causal self-attention over a paged KV cache, grouped by KV head: the query heads that share a KV
// head are processed together, so each cached key and value is read once per group, not once per
// head. One call covers every sequence of a batch (one parallel region per layer), each sequence
// reading only its own blocks.
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

// One layer's K/V pages. Block b, KV head h holds `block_size` positions of head_dim floats at
// k + ((b * n_kv_heads + h) * block_size) * head_dim (v alike): a head's keys are contiguous
// within a block, so the decode loop streams through them.
struct KvPages {
  float* k = nullptr;
  float* v = nullptr;
  int64_t block_size = 0;
};

// One sequence's rows of the batch: rows row0 .. row0+n-1 are its positions pos0 .. pos0+n-1;
// position p lives in block blocks[p / block_size].
struct AttentionSpan {
  int64_t row0 = 0, n = 0, pos0 = 0;
  const int32_t* blocks = nullptr;
};

// Writes the new rows' keys and values (k, v: [rows, n_kv_heads * head_dim] with row strides) into
// their sequences' pages at their positions.
void kv_store(const float* k, int64_t k_stride, const float* v, int64_t v_stride, const AttentionSpan* spans,
              int64_t n_spans, int n_kv_heads, int head_dim, const KvPages& pages);

// q:   [rows, n_heads * head_dim] with row stride q_stride
// out: [rows, n_heads * head_dim] with row stride out_stride
// Each query at position p attends to its sequence's positions 0..p (the causal mask); the keys of
// the batch's own rows must already be stored (kv_store).
void attention_paged(const float* q, int64_t q_stride, const AttentionSpan* spans, int64_t n_spans,
                     const AttentionShape& s, const KvPages& pages, float* out, int64_t out_stride,
                     Isa isa = best_isa());

}  // namespace kvad::kernels
