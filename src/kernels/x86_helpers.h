// Small x86 helpers shared by the *_avx2.cpp / *_avx512.cpp kernel files. Include only from files
// compiled with AVX2 + F16C (or more). The functions have internal linkage on purpose: each
// kernel file compiles them with its own target flags, and one shared (inline, external) copy
// could let the linker hand an AVX-512 build of them to the AVX2 path.
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "quant/packed.h"

namespace kvad::kernels {
namespace {

// Decode's software prefetch: every cache line of a q8/q4 record (quant/packed.h), `ahead` bytes
// past it, so one thread's sequential stream of records arrives before it is read.
template <QKind K>
inline void prefetch_record(const uint8_t* rec, int ahead) {
  constexpr int lines = (int)(QuantMatrix::record_bytes(K) + 63) / 64;
  #pragma GCC unroll 9
  for (int l = 0; l < lines; l++) _mm_prefetch((const char*)rec + ahead + l * 64, _MM_HINT_T0);
}

// The f16 stored at p (unaligned), as a float.
inline float f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// Sum of the 8 lanes.
inline float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace
}  // namespace kvad::kernels
