#version 450
// Per row: RMSNorm (mode 0: x / rms * w) or LayerNorm (mode 1: (x - mean) / sd * w + b). One
// workgroup per row; out may be x.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform P {
  Floats x; Floats out_; Floats w; Floats b;
  int rows; int cols; int x_stride; int out_stride; int mode; float eps;
} p;

shared float part[256];

float row_sum(float v) {
  uint t = gl_LocalInvocationID.x;
  part[t] = v;
  barrier();
  for (uint s = 128u; s > 0u; s >>= 1) {
    if (t < s) part[t] += part[t + s];
    barrier();
  }
  float total = part[0];
  barrier();
  return total;
}

void main() {
  uint r = gl_WorkGroupID.x + gl_NumWorkGroups.x * gl_WorkGroupID.y;
  if (r >= uint(p.rows)) return;
  uint t = gl_LocalInvocationID.x, xr = r * uint(p.x_stride), orow = r * uint(p.out_stride);
  float mean = 0.0;
  if (p.mode == 1) {
    float s = 0.0;
    for (uint c = t; c < uint(p.cols); c += 256u) s += p.x.v[xr + c];
    mean = row_sum(s) / float(p.cols);
  }
  float ss = 0.0;
  for (uint c = t; c < uint(p.cols); c += 256u) {
    float v = p.x.v[xr + c] - mean;
    ss += v * v;
  }
  float inv = 1.0 / sqrt(row_sum(ss) / float(p.cols) + p.eps);
  for (uint c = t; c < uint(p.cols); c += 256u) {
    float v = (p.x.v[xr + c] - mean) * inv * p.w.v[c];
    if (p.mode == 1) v += p.b.v[c];
    p.out_.v[orow + c] = v;
  }
}
