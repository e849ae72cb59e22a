#version 450
// Causal attention of one query row and head over its sequence's pages (positions 0 .. its own),
// one workgroup each. Keys are scored 64 at a time (a thread per position), and the running
// softmax (max m, sum l) rescales the value sums as each tile arrives, so any context length runs
// in fixed shared memory. Head dims up to 256 (4 value columns per thread). The pages hold rows of
// f32, bf16 or q8 (kv_type; kv_store.comp has the layouts), widened as they are read.
#include "common.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform P {
  Floats q; Floats out_; Floats kpages; Floats vpages; Ints row_info; Ints blocks;
  int rows; int heads; int kv_heads; int head_dim; int q_stride; int out_stride; int block_size; float scale; int kv_type;
} p;

shared float qs[256];
shared float probs[64];

// q8 code c of the head row `row` (a row: head_dim / 4 words of codes, then the scale's word).
int q8_code(Floats pages, uint row, uint c) {
  uint word = Uints(pages).v[row * (uint(p.head_dim) / 4u + 1u) + c / 4u];
  return int(word << (24u - 8u * (c % 4u))) >> 24;  // the byte, sign-extended
}
float q8_scale(Floats pages, uint row) {
  uint words = uint(p.head_dim) / 4u + 1u;
  return uintBitsToFloat(Uints(pages).v[row * words + words - 1u]);
}

// Element c of the head row `row` (a position's slot) of a page buffer.
float page_at(Floats pages, uint row, uint c) {
  if (p.kv_type == KV_BF16) return bf16_at(Uints(pages), row * uint(p.head_dim) + c);
  if (p.kv_type == KV_Q8) return float(q8_code(pages, row, c)) * q8_scale(pages, row);
  return pages.v[row * uint(p.head_dim) + c];
}

// q . key of the row: q8 sums the codes and scales once, as the CPU's cache does.
float key_dot(uint row) {
  uint hd = uint(p.head_dim);
  float dot_ = 0.0;
  if (p.kv_type == KV_Q8) {
    for (uint c = 0u; c < hd; c++) dot_ += qs[c] * float(q8_code(p.kpages, row, c));
    return dot_ * q8_scale(p.kpages, row);
  }
  for (uint c = 0u; c < hd; c++) dot_ += qs[c] * page_at(p.kpages, row, c);
  return dot_;
}

void main() {
  uint h = gl_WorkGroupID.x, r = gl_WorkGroupID.y + gl_NumWorkGroups.y * gl_WorkGroupID.z;
  if (r >= uint(p.rows)) return;
  uint t = gl_LocalInvocationID.x, hd = uint(p.head_dim), bs = uint(p.block_size);
  uint kvh = h / uint(p.heads / p.kv_heads);
  uint pos = uint(p.row_info.v[2u * r]), table = uint(p.row_info.v[2u * r + 1u]);
  for (uint c = t; c < hd; c += 64u) qs[c] = p.q.v[r * uint(p.q_stride) + h * hd + c];
  barrier();

  float m = -1.0 / 0.0, l = 0.0;
  float acc[4] = float[4](0.0, 0.0, 0.0, 0.0);
  for (uint t0 = 0u; t0 <= pos; t0 += 64u) {
    uint key = t0 + t;
    float s = -1.0 / 0.0;
    if (key <= pos) {
      uint row = (uint(p.blocks.v[table + key / bs]) * uint(p.kv_heads) + kvh) * bs + key % bs;
      s = key_dot(row) * p.scale;
    }
    probs[t] = s;
    barrier();
    float tile_max = -1.0 / 0.0;
    uint count = min(64u, pos + 1u - t0);
    for (uint i = 0u; i < count; i++) tile_max = max(tile_max, probs[i]);
    float m_new = max(m, tile_max);
    float correction = exp(m - m_new);  // 0 on the first tile (m = -inf)
    barrier();
    probs[t] = t < count ? exp(s - m_new) : 0.0;
    barrier();
    float tile_sum = 0.0;
    for (uint i = 0u; i < count; i++) tile_sum += probs[i];
    l = l * correction + tile_sum;
    for (uint j = 0u; j < 4u; j++) {
      uint c = t + 64u * j;
      if (c >= hd) break;
      float a = acc[j] * correction;
      for (uint i = 0u; i < count; i++) {
        uint key2 = t0 + i;
        uint row = (uint(p.blocks.v[table + key2 / bs]) * uint(p.kv_heads) + kvh) * bs + key2 % bs;
        a += probs[i] * page_at(p.vpages, row, c);
      }
      acc[j] = a;
    }
    m = m_new;
    barrier();
  }
  for (uint j = 0u; j < 4u; j++) {
    uint c = t + 64u * j;
    if (c < hd) p.out_.v[r * uint(p.out_stride) + h * hd + c] = acc[j] / l;
  }
}
