// rowops_simd.h at 8 lanes (one ymm).
#include <immintrin.h>

#include <cstdint>

constexpr int W = 8;
typedef float V __attribute__((vector_size(32)));
typedef int32_t VI __attribute__((vector_size(32)));
static inline V vsqrt(V x) { return (V)_mm256_sqrt_ps((__m256)x); }

#include "train/rowops_simd.h"

kvad::train::RowOps<float> kvad::train::rowops_avx2() { return make_simd_rowops(); }
