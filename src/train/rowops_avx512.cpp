// rowops_simd.h at 16 lanes (one zmm).
#include <immintrin.h>

#include <cstdint>

constexpr int W = 16;
typedef float V __attribute__((vector_size(64)));
typedef int32_t VI __attribute__((vector_size(64)));
static inline V vsqrt(V x) { return (V)_mm512_sqrt_ps((__m512)x); }

#include "train/rowops_simd.h"

kvad::train::RowOps<float> kvad::train::rowops_avx512() { return make_simd_rowops(); }
