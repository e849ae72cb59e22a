#version 450
// Rotate-half rope (GPT-NeoX, Llama, Qwen): for each row, head and i < half,
//   (a, b) = (x[i], x[i + half]) -> (a cos - b sin, b cos + a sin), angles from the row's table
//   [cos(half) | sin(half)].
#include "common.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform P {
  Floats x; Floats table;
  int rows; int heads; int head_dim; int x_stride; int table_stride;
} p;

void main() {
  uint half_ = uint(p.head_dim / 2);
  uint i = gl_GlobalInvocationID.x;  // over heads * half
  uint r = gl_WorkGroupID.y + gl_NumWorkGroups.y * gl_WorkGroupID.z;
  if (i >= uint(p.heads) * half_ || r >= uint(p.rows)) return;
  uint h = i / half_, k = i % half_;
  uint base = r * uint(p.x_stride) + h * uint(p.head_dim) + k;
  float c = p.table.v[r * uint(p.table_stride) + k], s = p.table.v[r * uint(p.table_stride) + half_ + k];
  float a = p.x.v[base], b = p.x.v[base + half_];
  p.x.v[base] = a * c - b * s;
  p.x.v[base + half_] = b * c + a * s;
}
