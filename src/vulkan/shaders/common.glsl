// Shared by every kvad compute shader: tensors are reached through buffer device addresses passed
// in push constants (no descriptor sets), so a Tensor's view arithmetic (a column slice, a row
// range) is done on the host and a shader sees a plain base address plus a row stride.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require

layout(buffer_reference, std430, buffer_reference_align = 4) buffer Floats { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer Uints { uint v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer Ints { int v[]; };

// Weight formats on the device (vulkan/device_weight.h says the layouts).
const int FMT_F32 = 0;
const int FMT_BF16 = 1;
const int FMT_Q8 = 2;
const int FMT_Q4 = 3;

float bf16_at(Uints w, uint i) {
  uint word = w.v[i >> 1];
  return uintBitsToFloat((i & 1u) != 0u ? (word & 0xffff0000u) : (word << 16));
}

float f16_at(Uints h, uint i) {
  vec2 pair = unpackHalf2x16(h.v[i >> 1]);
  return (i & 1u) != 0u ? pair.y : pair.x;
}

// Element (row, col) of a weight matrix of `cols` columns in `format`; blocks = 32-column blocks
// per row (quantised formats: codes rows are padded to blocks * 32).
float weight_at(int format, Uints w, Uints d, Uints m, uint row, uint col, uint cols, uint blocks) {
  if (format == FMT_F32) return uintBitsToFloat(w.v[row * cols + col]);
  if (format == FMT_BF16) return bf16_at(w, row * cols + col);
  uint b = row * blocks + col / 32u;
  uint i = row * blocks * 32u + col;
  if (format == FMT_Q8) {
    uint code = (w.v[i >> 2] >> ((i & 3u) * 8u)) & 0xffu;
    return f16_at(d, b) * (float(code) - 128.0);
  }
  uint code = (w.v[i >> 3] >> ((i & 7u) * 4u)) & 0xfu;
  return f16_at(d, b) * float(code) + f16_at(m, b);
}
