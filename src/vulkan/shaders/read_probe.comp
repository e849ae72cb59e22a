#version 450
// Reads a buffer once, 16 bytes a lane, consecutive lanes on consecutive addresses: the device's
// read bandwidth, which a decode step's share is taken of (kvad bench --device gpu). The xor of
// what was read is stored only if it equals a value no input makes, so nothing can be skipped.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(buffer_reference, std430, buffer_reference_align = 16) buffer Quads { uvec4 v[]; };
layout(push_constant) uniform P {
  Quads src; Uints sink;
  uint quads;
} p;

void main() {
  uint stride = gl_NumWorkGroups.x * 256u;
  uvec4 acc = uvec4(0u);
  for (uint i = gl_GlobalInvocationID.x; i < p.quads; i += stride) acc ^= p.src.v[i];
  if (acc.x == 0x9e3779b9u && acc.y == 0x7f4a7c15u && acc.z == acc.w) p.sink.v[0] = acc.z;
}
