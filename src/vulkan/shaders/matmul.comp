#version 450
// y[n, rows] = x[n, cols] W[rows, cols]^T. A thread per output column j and up to 8 input rows,
// with no shared memory and no barrier: on a CPU driver (lavapipe, where CI runs) a barrier splits
// every invocation into a coroutine, and a row per SIMD lane is what vectorises. A GPU-tuned
// product (a subgroup per row, tiles for prefill) is the next kernel to write where a GPU is at
// hand (docs/gpu.md).
#include "common.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform P {
  Floats x; Floats y; Uints w; Uints d; Uints m;
  int n; int cols; int rows; int x_stride; int y_stride; int format; int blocks;
} p;

const int NB = 8;

void main() {
  uint j = gl_GlobalInvocationID.x + gl_NumWorkGroups.x * 64u * gl_WorkGroupID.z;
  if (j >= uint(p.rows)) return;
  int r0 = int(gl_WorkGroupID.y) * NB;
  int nb = min(NB, p.n - r0);
  float acc[NB];
  for (int b = 0; b < NB; b++) acc[b] = 0.0;
  for (uint c = 0u; c < uint(p.cols); c++) {
    float wv = weight_at(p.format, p.w, p.d, p.m, j, c, uint(p.cols), uint(p.blocks));
    for (int b = 0; b < nb; b++) acc[b] += wv * p.x.v[uint(r0 + b) * uint(p.x_stride) + c];
  }
  for (int b = 0; b < nb; b++) p.y.v[uint(r0 + b) * uint(p.y_stride) + j] = acc[b];
}
