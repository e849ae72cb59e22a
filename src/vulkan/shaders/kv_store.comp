#version 450
// Writes each batch row's keys and values into its sequence's pages at its position. Page layout
// (per layer): [block][kv_head][position in block] rows of the head's values, in the cache's type
// (kv_type, KvType's order): f32; bf16, two values a word, rounded to nearest even as the CPU's
// cache rounds them (core/dtype.h); q8, int8 codes four a word then the f32 scale (amax / 127),
// the CPU's row (kernels/attention.cpp). rows[r] = (position, offset of the row's block table in
// `blocks`).
#include "common.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform P {
  Floats k; Floats v; Floats kpages; Floats vpages; Ints row_info; Ints blocks;
  int rows; int kv_heads; int head_dim; int k_stride; int v_stride; int block_size; int kv_type;
} p;

uint bf16_bits(float f) {
  uint u = floatBitsToUint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x40u;  // NaN stays NaN
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

// One head's values at x[0 .. head_dim) as a q8 row at word `row` of `pages`.
void store_q8(Floats x, uint at, Uints pages, uint row) {
  uint hd = uint(p.head_dim);
  float amax = 0.0;
  for (uint c = 0u; c < hd; c++) amax = max(amax, abs(x.v[at + c]));
  float inv = amax > 0.0 ? 127.0 / amax : 0.0;
  for (uint w = 0u; w < hd / 4u; w++) {
    uint word = 0u;
    for (uint j = 0u; j < 4u; j++) {
      int code = int(roundEven(clamp(x.v[at + 4u * w + j] * inv, -127.0, 127.0)));
      word |= (uint(code) & 0xffu) << (8u * j);
    }
    pages.v[row + w] = word;
  }
  pages.v[row + hd / 4u] = floatBitsToUint(amax / 127.0);
}

void main() {
  // f32: one value a thread; bf16: a word of two neighbouring values (a head's size is even, so a
  // pair never straddles two heads); q8: a whole head, whose scale needs all of its values.
  uint per = p.kv_type == KV_BF16 ? 2u : p.kv_type == KV_Q8 ? uint(p.head_dim) : 1u;
  uint i = gl_GlobalInvocationID.x * per;  // over kv_heads * head_dim
  uint r = gl_WorkGroupID.y + gl_NumWorkGroups.y * gl_WorkGroupID.z;
  uint width = uint(p.kv_heads * p.head_dim);
  if (i >= width || r >= uint(p.rows)) return;
  uint pos = uint(p.row_info.v[2u * r]), table = uint(p.row_info.v[2u * r + 1u]);
  uint bs = uint(p.block_size);
  uint block = uint(p.blocks.v[table + pos / bs]);
  uint h = i / uint(p.head_dim), c = i % uint(p.head_dim);
  uint slot = (block * uint(p.kv_heads) + h) * bs + pos % bs;  // the position's row
  uint ks = r * uint(p.k_stride) + i, vs = r * uint(p.v_stride) + i;
  if (p.kv_type == KV_Q8) {
    uint words = uint(p.head_dim) / 4u + 1u;
    store_q8(p.k, ks, Uints(p.kpages), slot * words);
    store_q8(p.v, vs, Uints(p.vpages), slot * words);
  } else if (p.kv_type == KV_BF16) {
    uint dst = slot * uint(p.head_dim) + c;
    Uints(p.kpages).v[dst >> 1] = bf16_bits(p.k.v[ks]) | (bf16_bits(p.k.v[ks + 1u]) << 16);
    Uints(p.vpages).v[dst >> 1] = bf16_bits(p.v.v[vs]) | (bf16_bits(p.v.v[vs + 1u]) << 16);
  } else {
    uint dst = slot * uint(p.head_dim) + c;
    p.kpages.v[dst] = p.k.v[ks];
    p.vpages.v[dst] = p.v.v[vs];
  }
}
