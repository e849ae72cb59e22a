// Causal self-attention over a paged KV cache, grouped by KV head: the query heads that share a KV
// head are processed together, so each cached key and value is read once per group, not once per
// head. One call covers every sequence of a batch (one parallel region per layer), each sequence
// reading only its own blocks.
#pragma once
#include <cstdint>
#include <string>

#include "core/cpu.h"

namespace kvad::kernels {

struct AttentionShape {
  int n_heads;     // query heads
  int n_kv_heads;  // key/value heads (n_heads % n_kv_heads == 0)
  int head_dim;    // of queries and keys (and of the rows the pages hold)
  float scale;     // usually 1/sqrt(head_dim)
  // Values are the first value_dim columns of each V row (0: all head_dim). Multi-head latent
  // attention is one KV head whose rows are [latent | rope key] and whose values are the latent
  // alone, read from the same pages (kernels/latent_attention.h).
  int value_dim = 0;

  int v_dim() const { return value_dim > 0 ? value_dim : head_dim; }
};

// What the cache stores per position and head (--kv-type; docs/engine.md has the measurements):
//   F32   head_dim floats
//   BF16  head_dim bfloat16 (round to nearest even): half the bytes
//   Q8    head_dim int8 then one f32 scale (amax / 127, symmetric): about a quarter
// The attention loops read f32: a block of another type is converted into a small tile first.
enum class KvType : uint8_t { F32, BF16, Q8 };
const char* kv_type_name(KvType t);
// "f32" | "bf16" | "q8"; throws naming the accepted values otherwise.
KvType parse_kv_type(const std::string& name);
// Bytes of one position of one KV head.
int64_t kv_row_bytes(KvType t, int64_t head_dim);

// One layer's K/V pages. Block b, KV head h holds `block_size` positions of kv_row_bytes(type,
// head_dim) bytes each at k + b * block_stride + h * block_size * row_bytes (v alike). block_stride
// 0 means the layer's blocks follow each other (n_kv_heads * block_size * row_bytes); the engine's
// memory keeps each block's layers together instead (backend/memory.h), so its stride is a whole
// block of every layer.
// Within a head's block, values are rows (a position's head_dim values together: the decode loop
// adds whole rows into its outputs). bf16 and q8 keys are stored by dimension: [head_dim]
// [block_size] elements, then for q8 the block_size scales. A decode step's scores are then,
// dimension by dimension, one vector of the block's keys, widened in the registers, times each
// query head's value: no horizontal sums and no widened tile written and read back. f32 keys stay
// rows: read in place they gained nothing end to end and their by-dimension stores cost more
// (docs/kv-cache.md, "Keys by dimension"); latent pages (v == k) too, their rows being the values.
struct KvPages {
  uint8_t* k = nullptr;
  uint8_t* v = nullptr;
  int64_t block_size = 0;
  KvType type = KvType::F32;
  int64_t block_stride = 0;

  bool keys_by_dimension() const { return v != k && type != KvType::F32; }
};

// Where block `block`'s rows of KV head h start on one side (kv.k or kv.v); Byte is uint8_t or
// const uint8_t.
template <typename Byte>
Byte* kv_block_rows(Byte* side, const KvPages& kv, int64_t block, int64_t h, int64_t n_kv_heads, int64_t row_bytes) {
  const int64_t head_bytes = kv.block_size * row_bytes;
  return side + block * (kv.block_stride > 0 ? kv.block_stride : n_kv_heads * head_bytes) + h * head_bytes;
}

// One sequence's rows of the batch: rows row0 .. row0+n-1 are its positions pos0 .. pos0+n-1;
// position p lives in block blocks[p / block_size].
struct AttentionSpan {
  int64_t row0 = 0, n = 0, pos0 = 0;
  const int32_t* blocks = nullptr;
  // Each query attends on its own, as a decode step's does, even when the span is long enough
  // for the matrix-product path: speculative verification must compute every row exactly as plain
  // decoding would (the products sum in another order, and a near-tie argmax can flip on that).
  bool rowwise = false;
};

// Writes the new rows' keys and values (k, v: [rows, n_kv_heads * head_dim] with row strides) into
// their sequences' pages at their positions. v null: K-only pages (a latent layer's).
void kv_store(const float* k, int64_t k_stride, const float* v, int64_t v_stride, const AttentionSpan* spans,
              int64_t n_spans, int n_kv_heads, int head_dim, const KvPages& pages);

// q:   [rows, n_heads * head_dim] with row stride q_stride
// out: [rows, n_heads * v_dim()] with row stride out_stride
// Each query at position p attends to its sequence's positions 0..p (the causal mask); the keys of
// the batch's own rows must already be stored (kv_store).
void attention_paged(const float* q, int64_t q_stride, const AttentionSpan* spans, int64_t n_spans,
                     const AttentionShape& s, const KvPages& pages, float* out, int64_t out_stride,
                     Isa isa = best_isa());

}  // namespace kvad::kernels
