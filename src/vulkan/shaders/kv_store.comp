#version 450
// Writes each batch row's keys and values into its sequence's pages at its position. Page layout
// (per layer): [block][kv_head][position in block][head_dim], f32 or bf16 (kv_bf16: two values a
// word, rounded to nearest even as the CPU's cache rounds them, core/dtype.h). rows[r] =
// (position, offset of the row's block table in `blocks`).
#include "common.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform P {
  Floats k; Floats v; Floats kpages; Floats vpages; Ints row_info; Ints blocks;
  int rows; int kv_heads; int head_dim; int k_stride; int v_stride; int block_size; int kv_bf16;
} p;

uint bf16_bits(float f) {
  uint u = floatBitsToUint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x40u;  // NaN stays NaN
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

void main() {
  // One value each (f32), or one pair of neighbouring values (bf16: a word holds two, and a head's
  // dimension is even, so a pair never straddles two heads).
  uint per = p.kv_bf16 != 0 ? 2u : 1u;
  uint i = gl_GlobalInvocationID.x * per;  // over kv_heads * head_dim
  uint r = gl_WorkGroupID.y + gl_NumWorkGroups.y * gl_WorkGroupID.z;
  uint width = uint(p.kv_heads * p.head_dim);
  if (i >= width || r >= uint(p.rows)) return;
  uint pos = uint(p.row_info.v[2u * r]), table = uint(p.row_info.v[2u * r + 1u]);
  uint bs = uint(p.block_size);
  uint block = uint(p.blocks.v[table + pos / bs]);
  uint h = i / uint(p.head_dim), c = i % uint(p.head_dim);
  uint dst = ((block * uint(p.kv_heads) + h) * bs + pos % bs) * uint(p.head_dim) + c;
  uint ks = r * uint(p.k_stride) + i, vs = r * uint(p.v_stride) + i;
  if (p.kv_bf16 != 0) {
    Uints(p.kpages).v[dst >> 1] = bf16_bits(p.k.v[ks]) | (bf16_bits(p.k.v[ks + 1u]) << 16);
    Uints(p.vpages).v[dst >> 1] = bf16_bits(p.v.v[vs]) | (bf16_bits(p.v.v[vs + 1u]) << 16);
  } else {
    p.kpages.v[dst] = p.k.v[ks];
    p.vpages.v[dst] = p.v.v[vs];
  }
}
