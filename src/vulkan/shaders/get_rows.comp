#version 450
// out[r] = W.row(ids[r]) dequantised (the embedding lookup): one workgroup per row.
#include "common.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform P {
  Floats out_; Uints w; Uints d; Uints m; Ints ids;
  int rows; int cols; int out_stride; int format; int blocks;
} p;

void main() {
  uint r = gl_WorkGroupID.x + gl_NumWorkGroups.x * gl_WorkGroupID.y;
  if (r >= uint(p.rows)) return;
  uint id = uint(p.ids.v[r]);
  for (uint c = gl_LocalInvocationID.x; c < uint(p.cols); c += 64u)
    p.out_.v[r * uint(p.out_stride) + c] = weight_at(p.format, p.w, p.d, p.m, id, c, uint(p.cols), uint(p.blocks));
}
