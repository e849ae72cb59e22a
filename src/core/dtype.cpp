#include "core/dtype.h"

#include <cmath>
#include <limits>

namespace kvad {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: case DType::I32: return 4;
    case DType::F16: case DType::BF16: return 2;
    case DType::I64: case DType::F64: return 8;
    case DType::U8: case DType::I8: case DType::BOOL: case DType::F8_E4M3: return 1;
    case DType::KQ8: case DType::KQ4: return 0;
    case DType::Q8_0: case DType::Q4_0: case DType::Q4_1: case DType::Q5_0: case DType::Q5_1:
    case DType::Q4_K: case DType::Q5_K: case DType::Q6_K: return 0;
  }
  return 0;
}

bool dtype_is_block(DType t) { return dtype_block_elems(t) > 1; }

int64_t dtype_block_elems(DType t) {
  switch (t) {
    case DType::Q8_0: case DType::Q4_0: case DType::Q4_1: case DType::Q5_0: case DType::Q5_1: return 32;
    case DType::Q4_K: case DType::Q5_K: case DType::Q6_K: return 256;
    default: return 1;
  }
}

size_t dtype_block_bytes(DType t) {
  switch (t) {  // ggml-common.h: block_q8_0 ... block_q6_K
    case DType::Q8_0: return 34;   // f16 d, i8 qs[32]
    case DType::Q4_0: return 18;   // f16 d, u8 qs[16]
    case DType::Q4_1: return 20;   // f16 d, f16 m, u8 qs[16]
    case DType::Q5_0: return 22;   // f16 d, u8 qh[4], u8 qs[16]
    case DType::Q5_1: return 24;   // f16 d, f16 m, u8 qh[4], u8 qs[16]
    case DType::Q4_K: return 144;  // f16 d, f16 dmin, u8 scales[12], u8 qs[128]
    case DType::Q5_K: return 176;  // f16 d, f16 dmin, u8 scales[12], u8 qh[32], u8 qs[128]
    case DType::Q6_K: return 210;  // u8 ql[128], u8 qh[64], i8 scales[16], f16 d
    default: return dtype_size(t);
  }
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
    case DType::U8: return "U8";
    case DType::I8: return "I8";
    case DType::F64: return "F64";
    case DType::BOOL: return "BOOL";
    case DType::F8_E4M3: return "F8_E4M3";  // safetensors' name for torch.float8_e4m3fn
    case DType::KQ8: return "KVAD_Q8";
    case DType::KQ4: return "KVAD_Q4";
    case DType::Q8_0: return "Q8_0";
    case DType::Q4_0: return "Q4_0";
    case DType::Q4_1: return "Q4_1";
    case DType::Q5_0: return "Q5_0";
    case DType::Q5_1: return "Q5_1";
    case DType::Q4_K: return "Q4_K";
    case DType::Q5_K: return "Q5_K";
    case DType::Q6_K: return "Q6_K";
  }
  return "?";
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: renormalise
      int e = -1;
      do {
        e++;
        mant <<= 1;
      } while (!(mant & 0x400));
      u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((mant & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000 | (mant << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000;
  uint32_t au = u & 0x7fffffff;
  if (au > 0x7f800000) return (uint16_t)(sign | 0x7e00);  // NaN
  if (au >= 0x477ff000) return (uint16_t)(sign | 0x7c00);  // overflow -> inf (rounds past 65504)
  if (au < 0x38800000) {  // subnormal or zero in f16
    float a;
    std::memcpy(&a, &au, 4);
    // 2^-24 is the smallest subnormal; nearbyint rounds half to even in the default mode.
    uint32_t m = (uint32_t)std::nearbyint(a * 16777216.0f);
    return (uint16_t)(sign | m);
  }
  uint32_t e = ((au >> 23) - 127 + 15);
  uint32_t mant = au & 0x7fffff;
  uint32_t h = (e << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++;
  return (uint16_t)(sign | h);
}

float fp8_e4m3_to_f32(uint8_t b) {
  const int exp = (b >> 3) & 0xf, mant = b & 7;
  float mag;
  if (exp == 0xf && mant == 7) mag = std::numeric_limits<float>::quiet_NaN();
  else if (exp == 0) mag = std::ldexp((float)mant, -9);  // subnormal: mant/8 x 2^-6
  else mag = std::ldexp((float)(8 + mant), exp - 10);    // (1 + mant/8) x 2^(exp-7)
  return (b & 0x80) ? -mag : mag;
}

}  // namespace kvad
