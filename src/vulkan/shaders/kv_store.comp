#version 450
// Writes each batch row's keys and values into its sequence's pages at its position. Page layout
// (per layer): [block][kv_head][position in block][head_dim] f32. rows[r] = (position, offset of
// the row's block table in `blocks`).
#include "common.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform P {
  Floats k; Floats v; Floats kpages; Floats vpages; Ints row_info; Ints blocks;
  int rows; int kv_heads; int head_dim; int k_stride; int v_stride; int block_size;
} p;

void main() {
  uint i = gl_GlobalInvocationID.x;  // over kv_heads * head_dim
  uint r = gl_WorkGroupID.y + gl_NumWorkGroups.y * gl_WorkGroupID.z;
  uint width = uint(p.kv_heads * p.head_dim);
  if (i >= width || r >= uint(p.rows)) return;
  uint pos = uint(p.row_info.v[2u * r]), table = uint(p.row_info.v[2u * r + 1u]);
  uint bs = uint(p.block_size);
  uint block = uint(p.blocks.v[table + pos / bs]);
  uint h = i / uint(p.head_dim), c = i % uint(p.head_dim);
  uint dst = ((block * uint(p.kv_heads) + h) * bs + pos % bs) * uint(p.head_dim) + c;
  p.kpages.v[dst] = p.k.v[r * uint(p.k_stride) + i];
  p.vpages.v[dst] = p.v.v[r * uint(p.v_stride) + i];
}
