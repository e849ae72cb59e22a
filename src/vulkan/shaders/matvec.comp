#version 450
// y[n, rows] = x[n, cols] W[rows, cols]^T shaped for a GPU: one SUBGROUP per output row, its lanes
// striding along the row so that each load instruction of the subgroup reads one contiguous run of
// the weight (16 bytes a lane where the row is aligned: a warp of 32 reads 512 bytes at once), and
// a subgroup sum at the end. Decode is a pass over the weights, so this is the bandwidth kernel.
// Input rows come NB at a time (workgroup z); each block of NB rows reads the weights once more,
// which is why prefill wants a tiled product instead. matmul.comp is the CPU driver's (lavapipe's)
// kernel: there a subgroup operation costs what a barrier does.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"
layout(local_size_x = 128) in;
layout(push_constant) uniform P {
  Floats x; Floats y; Uints w; Uints d; Uints m;
  int n; int cols; int rows; int x_stride; int y_stride; int format; int blocks;
  int wide;  // 1: the rows start 16-byte aligned and the format has a 16-byte unit (read as uvec4)
} p;

layout(buffer_reference, std430, buffer_reference_align = 16) buffer Quads { uvec4 v[]; };

const int NB = 8;              // input rows per workgroup (z): accumulators per lane
const uint ROWS_PER_GROUP = 4u;  // output rows per workgroup: one per subgroup of 32 lanes

float acc[NB];
int nb;
uint r0;

// acc[b] += sum over k < len of v[k] * x[b, c0 + k], columns past `cols` (a quantised row's
// padding) read as nothing.
void add_run(float v[32], int len, uint c0) {
  for (int b = 0; b < NB; b++) {
    if (b >= nb) break;
    uint base = (r0 + uint(b)) * uint(p.x_stride);
    float s = 0.0;
    for (int k = 0; k < len; k++) {
      uint c = c0 + uint(k);
      if (c < uint(p.cols)) s += v[k] * p.x.v[base + c];
    }
    acc[b] += s;
  }
}

// Row j's 16-byte units as values, each format its own loop so that the run lengths are constants
// (unrolled): f32 4 values a unit, bf16 8, q8 16 (half a block, one scale), q4 32 (one block).
void wide_row(uint j, uint lane, uint width) {
  Quads q = Quads(p.w);
  float v[32];
  if (p.format == FMT_F32) {
    uint units = uint(p.cols) / 4u;
    for (uint u = lane; u < units; u += width) {
      uvec4 word = q.v[j * units + u];
      for (int k = 0; k < 4; k++) v[k] = uintBitsToFloat(word[k]);
      add_run(v, 4, u * 4u);
    }
  } else if (p.format == FMT_BF16) {
    uint units = uint(p.cols) / 8u;
    for (uint u = lane; u < units; u += width) {
      uvec4 word = q.v[j * units + u];
      for (int k = 0; k < 4; k++) {
        v[2 * k] = uintBitsToFloat(word[k] << 16);
        v[2 * k + 1] = uintBitsToFloat(word[k] & 0xffff0000u);
      }
      add_run(v, 8, u * 8u);
    }
  } else if (p.format == FMT_Q8) {
    uint units = uint(p.blocks) * 2u;
    for (uint u = lane; u < units; u += width) {
      uvec4 word = q.v[j * units + u];
      float scale = f16_at(p.d, j * uint(p.blocks) + u / 2u);
      for (int k = 0; k < 16; k++) v[k] = scale * (float((word[k / 4] >> ((k % 4) * 8)) & 0xffu) - 128.0);
      add_run(v, 16, u * 16u);
    }
  } else {  // FMT_Q4
    uint units = uint(p.blocks);
    for (uint u = lane; u < units; u += width) {
      uvec4 word = q.v[j * units + u];
      float scale = f16_at(p.d, j * units + u), offset = f16_at(p.m, j * units + u);
      for (int k = 0; k < 32; k++) v[k] = scale * float((word[k / 8] >> ((k % 8) * 4)) & 0xfu) + offset;
      add_run(v, 32, u * 32u);
    }
  }
}

void main() {
  uint group = gl_WorkGroupID.x + gl_NumWorkGroups.x * gl_WorkGroupID.y;
  r0 = gl_WorkGroupID.z * uint(NB);
  nb = min(NB, p.n - int(r0));
  uint lane = gl_SubgroupInvocationID, width = gl_SubgroupSize;
  uint last = min((group + 1u) * ROWS_PER_GROUP, uint(p.rows));
  // Where a subgroup is not 32 lanes there are not 4 subgroups: each takes rows in turn.
  for (uint j = group * ROWS_PER_GROUP + gl_SubgroupID; j < last; j += gl_NumSubgroups) {
    for (int b = 0; b < NB; b++) acc[b] = 0.0;
    if (p.wide != 0) {
      wide_row(j, lane, width);
    } else {
      // Any format, any alignment: a value per lane and step (K-quants decode in place).
      float v[32];
      for (uint c = lane; c < uint(p.cols); c += width) {
        v[0] = weight_at(p.format, p.w, p.d, p.m, j, c, uint(p.cols), uint(p.blocks));
        add_run(v, 1, c);
      }
    }
    for (int b = 0; b < NB; b++) {
      if (b >= nb) break;
      float s = subgroupAdd(acc[b]);
      if (subgroupElect()) p.y.v[(r0 + uint(b)) * uint(p.y_stride) + j] = s;
    }
  }
}
