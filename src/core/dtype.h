// Scalar element types of checkpoints and their conversions to f32.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>

namespace kvad {

enum class DType {
  F32, F16, BF16, I32, I64, U8, I8, F64, BOOL,
  F8_E4M3,  // float8 e4m3fn (DeepSeek-V3's FP8 checkpoints): 1 sign, 4 exponent (bias 7), 3 mantissa bits
  KQ8, KQ4,  // kvad's packed quantised matrices (quant/packed.h): block formats, dtype_size() is 0
  // ggml's block formats as GGUF stores them (runs of dtype_block_elems() values along a row in
  // dtype_block_bytes() bytes each), used in place: no requantising. dtype_size() is 0.
  Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K,
};

size_t dtype_size(DType t);
const char* dtype_name(DType t);
// Block formats (ggml's): values per block and bytes per block; 1 and dtype_size() for scalars.
bool dtype_is_block(DType t);
int64_t dtype_block_elems(DType t);
size_t dtype_block_bytes(DType t);

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even (NaN stays NaN), as torch and numpy do.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fff + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// float8 e4m3fn ("FP8 Formats for Deep Learning", arXiv:2209.05433; torch.float8_e4m3fn): no
// infinities, S.1111.111 is NaN, so the largest finite value is S.1111.110 = 448; exponent 0
// holds subnormals (mantissa / 8 x 2^-6). Every one of the 256 values is exact in f32.
float fp8_e4m3_to_f32(uint8_t b);

}  // namespace kvad
