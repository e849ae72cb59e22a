#version 450
// y[n, rows] = x[n, cols] W[rows, cols]^T for a batch of input rows (prefill) on a GPU: a
// workgroup computes a 64 x 64 tile of y, staging 32 columns of x and of W (dequantised, any
// format) in shared memory per step, so each weight value read from memory serves 64 input rows
// instead of matvec.comp's 8. Each of the 256 threads keeps a 4 x 4 block of sums in registers.
// (Plain f32 arithmetic: the tensor cores, through cooperative matrices, are the next step.)
#include "common.glsl"
layout(local_size_x = 16, local_size_y = 16) in;
layout(push_constant) uniform P {
  Floats x; Floats y; Uints w; Uints d; Uints m;
  int n; int cols; int rows; int x_stride; int y_stride; int format; int blocks;
} p;

const uint TILE = 64u, STEP = 32u;
// One padding column: threads reading a column of 16 different rows hit 16 different banks.
shared float xs[TILE][STEP + 1u];
shared float ws[TILE][STEP + 1u];

void main() {
  const uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y, tid = ty * 16u + tx;
  const uint out0 = (gl_WorkGroupID.x + gl_NumWorkGroups.x * gl_WorkGroupID.y) * TILE;  // weight rows
  const uint in0 = gl_WorkGroupID.z * TILE;                                            // input rows
  const uint cols = uint(p.cols);
  float acc[4][4];
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++) acc[i][j] = 0.0;

  for (uint k0 = 0u; k0 < cols; k0 += STEP) {
    // 64 x 32 values of each operand, 8 per thread, consecutive threads along a row (coalesced).
    for (uint e = tid; e < TILE * STEP; e += 256u) {
      uint r = e / STEP, k = e % STEP, c = k0 + k;
      bool in_x = in0 + r < uint(p.n) && c < cols, in_w = out0 + r < uint(p.rows) && c < cols;
      xs[r][k] = in_x ? p.x.v[(in0 + r) * uint(p.x_stride) + c] : 0.0;
      ws[r][k] = in_w ? weight_at(p.format, p.w, p.d, p.m, out0 + r, c, cols, uint(p.blocks)) : 0.0;
    }
    barrier();
    for (uint k = 0u; k < STEP; k++) {
      float a[4], b[4];
      for (int i = 0; i < 4; i++) a[i] = xs[ty + 16u * uint(i)][k];
      for (int j = 0; j < 4; j++) b[j] = ws[tx + 16u * uint(j)][k];
      for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) acc[i][j] += a[i] * b[j];
    }
    barrier();
  }
  for (int i = 0; i < 4; i++) {
    uint r = in0 + ty + 16u * uint(i);
    if (r >= uint(p.n)) continue;
    for (int j = 0; j < 4; j++) {
      uint o = out0 + tx + 16u * uint(j);
      if (o < uint(p.rows)) p.y.v[r * uint(p.y_stride) + o] = acc[i][j];
    }
  }
}
