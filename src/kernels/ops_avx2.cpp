// AVX2 versions of the element-wise activations (the scalar ones in ops.cpp are the reference).
#include <immintrin.h>

#include <cmath>

#include "core/dtype.h"
#include "kernels/vexp.h"

namespace kvad::kernels {

void silu_mul_avx2(float* gate, const float* up, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 g = _mm256_loadu_ps(gate + i), u = _mm256_loadu_ps(up + i);
    __m256 s = _mm256_div_ps(g, _mm256_add_ps(one, vexp::exp(_mm256_sub_ps(_mm256_setzero_ps(), g))));
    _mm256_storeu_ps(gate + i, _mm256_mul_ps(s, u));
  }
  for (; i < n; i++) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void gelu_tanh_avx2(float* x, int64_t n) {
  const __m256 c = _mm256_set1_ps(0.7978845608028654f), k = _mm256_set1_ps(0.044715f), half = _mm256_set1_ps(0.5f),
               one = _mm256_set1_ps(1.0f), two = _mm256_set1_ps(2.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    __m256 y = _mm256_mul_ps(c, _mm256_fmadd_ps(_mm256_mul_ps(k, v), _mm256_mul_ps(v, v), v));
    __m256 t = _mm256_sub_ps(one, _mm256_div_ps(two, _mm256_add_ps(vexp::exp(_mm256_mul_ps(two, y)), one)));
    _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_mul_ps(half, v), _mm256_add_ps(one, t)));
  }
  for (; i < n; i++) x[i] = 0.5f * x[i] * (1.0f + std::tanh(0.7978845608028654f * (x[i] + 0.044715f * x[i] * x[i] * x[i])));
}

void lowrank_add_avx2(float* y, const float* coef, const float* rows, int64_t r, int64_t n, int64_t stride) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 s = _mm256_loadu_ps(y + i);
    for (int64_t j = 0; j < r; j++) s = _mm256_fmadd_ps(_mm256_set1_ps(coef[j]), _mm256_loadu_ps(rows + j * stride + i), s);
    _mm256_storeu_ps(y + i, s);
  }
  for (; i < n; i++) {
    float s = y[i];
    for (int64_t j = 0; j < r; j++) s += coef[j] * rows[j * stride + i];
    y[i] = s;
  }
}

void lowrank_add_bf16_avx2(float* y, const float* coef, const uint16_t* rows, int64_t r, int64_t n, int64_t stride) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 s = _mm256_loadu_ps(y + i);
    for (int64_t j = 0; j < r; j++) {
      __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)(rows + j * stride + i)));
      s = _mm256_fmadd_ps(_mm256_set1_ps(coef[j]), _mm256_castsi256_ps(_mm256_slli_epi32(h, 16)), s);
    }
    _mm256_storeu_ps(y + i, s);
  }
  for (; i < n; i++) {
    float s = y[i];
    for (int64_t j = 0; j < r; j++) s += coef[j] * bf16_to_f32(rows[j * stride + i]);
    y[i] = s;
  }
}

}  // namespace kvad::kernels
