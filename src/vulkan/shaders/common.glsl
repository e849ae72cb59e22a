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
const int FMT_Q4_K = 4;  // ggml's K-quants, as GGUF stores them (quant/kquant.h has the layouts)
const int FMT_Q5_K = 5;
const int FMT_Q6_K = 6;

// What a KV cache stores (kernels::KvType's order): kv_store.comp and attention.comp.
const int KV_F32 = 0;
const int KV_BF16 = 1;
const int KV_Q8 = 2;

float bf16_at(Uints w, uint i) {
  uint word = w.v[i >> 1];
  return uintBitsToFloat((i & 1u) != 0u ? (word & 0xffff0000u) : (word << 16));
}

float f16_at(Uints h, uint i) {
  vec2 pair = unpackHalf2x16(h.v[i >> 1]);
  return (i & 1u) != 0u ? pair.y : pair.x;
}

uint byte_at(Uints w, uint i) { return (w.v[i >> 2] >> ((i & 3u) * 8u)) & 0xffu; }

float f16_bytes(Uints w, uint i) { return unpackHalf2x16(byte_at(w, i) | (byte_at(w, i + 1u) << 8)).x; }

// Value i (0..255) of the K-quant super-block at byte `base`.
float kquant_at(int format, Uints w, uint base, uint i) {
  if (format == FMT_Q6_K) {
    uint h = i / 128u, r = i % 128u, quarter = r / 32u, l = r % 32u;
    uint ql = byte_at(w, base + h * 64u + ((quarter & 1u) != 0u ? l + 32u : l));
    uint nib = quarter < 2u ? (ql & 0xfu) : (ql >> 4);
    uint qh = byte_at(w, base + 128u + h * 32u + l);
    int q = int(nib | (((qh >> (2u * quarter)) & 3u) << 4)) - 32;
    int sc = int(byte_at(w, base + 192u + h * 8u + l / 16u + 2u * quarter) << 24) >> 24;  // int8
    return f16_bytes(w, base + 208u) * float(sc) * float(q);
  }
  // Q4_K / Q5_K: 64-value chunks, low nibbles then high nibbles; sub-block j = 2 chunk + high.
  uint chunk = i / 64u, within = i % 64u, l = within % 32u, high = within / 32u, j = 2u * chunk + high;
  uint sc, mn, q = base + 4u;
  if (j < 4u) {
    sc = byte_at(w, q + j) & 63u;
    mn = byte_at(w, q + j + 4u) & 63u;
  } else {
    sc = (byte_at(w, q + j + 4u) & 0xfu) | ((byte_at(w, q + j - 4u) >> 6) << 4);
    mn = (byte_at(w, q + j + 4u) >> 4) | ((byte_at(w, q + j) >> 6) << 4);
  }
  bool q5 = format == FMT_Q5_K;
  uint qs = byte_at(w, base + (q5 ? 48u : 16u) + 32u * chunk + l);
  uint nib = high != 0u ? (qs >> 4) : (qs & 0xfu);
  if (q5) nib |= ((byte_at(w, base + 16u + l) >> j) & 1u) << 4;
  return f16_bytes(w, base) * float(sc) * float(nib) - f16_bytes(w, base + 2u) * float(mn);
}

// Element (row, col) of a weight matrix of `cols` columns in `format`; blocks = 32-column blocks
// per row (quantised formats: codes rows are padded to blocks * 32).
float weight_at(int format, Uints w, Uints d, Uints m, uint row, uint col, uint cols, uint blocks) {
  if (format == FMT_F32) return uintBitsToFloat(w.v[row * cols + col]);
  if (format == FMT_BF16) return bf16_at(w, row * cols + col);
  if (format >= FMT_Q4_K) {  // blocks = super-blocks of 256 per row
    uint block_bytes = format == FMT_Q4_K ? 144u : format == FMT_Q5_K ? 176u : 210u;
    return kquant_at(format, w, (row * blocks + col / 256u) * block_bytes, col % 256u);
  }
  uint b = row * blocks + col / 32u;
  uint i = row * blocks * 32u + col;
  if (format == FMT_Q8) {
    uint code = (w.v[i >> 2] >> ((i & 3u) * 8u)) & 0xffu;
    return f16_at(d, b) * (float(code) - 128.0);
  }
  uint code = (w.v[i >> 3] >> ((i & 7u) * 4u)) & 0xfu;
  return f16_at(d, b) * float(code) + f16_at(m, b);
}
