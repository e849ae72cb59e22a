#version 450
// Element-wise operations over [rows, cols] with row strides. op:
//   0 add        y += x
//   1 add_bias   y += x[col]
//   2 silu_mul   y = silu(y) * x
//   3 gelu_tanh  y = gelu(y) (tanh form)
//   4 add_rows   y += x[ids[row] * cols + col]   (GPT-2's position table)
//   5 gather     y = x[ids[row]]              (the rows that want logits)
//   6 add_scaled y += c * x                   (a LoRA side path)
#include "common.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform P {
  Floats y; Floats x; Ints ids;
  int op; int rows; int cols; int y_stride; int x_stride; float c;
} p;

void main() {
  uint c = gl_GlobalInvocationID.x;
  uint r = gl_WorkGroupID.y + gl_NumWorkGroups.y * gl_WorkGroupID.z;
  if (c >= uint(p.cols) || r >= uint(p.rows)) return;
  uint yi = r * uint(p.y_stride) + c;
  float y = p.op == 5 ? 0.0 : p.y.v[yi];
  if (p.op == 0) y += p.x.v[r * uint(p.x_stride) + c];
  else if (p.op == 1) y += p.x.v[c];
  else if (p.op == 2) y = y / (1.0 + exp(-y)) * p.x.v[r * uint(p.x_stride) + c];
  else if (p.op == 3) {
    float u = clamp(0.7978845608028654 * (y + 0.044715 * y * y * y), -15.0, 15.0);
    y = 0.5 * y * (1.0 + tanh(u));
  } else if (p.op == 4) y += p.x.v[uint(p.ids.v[r]) * uint(p.cols) + c];
  else if (p.op == 6) y += p.c * p.x.v[r * uint(p.x_stride) + c];
  else y = p.x.v[uint(p.ids.v[r]) * uint(p.x_stride) + c];
  p.y.v[yi] = y;
}
