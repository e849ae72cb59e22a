// AVX-512 versions of the element-wise activations (the scalar ones in ops.cpp are the reference).
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "kernels/vexp.h"
#include "kernels/x86_helpers.h"

namespace kvad::kernels {

void rmsnorm_avx512(const float* x, const float* w, float eps, int64_t n, float* out) {
  __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v)), hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    s0 = _mm512_fmadd_pd(lo, lo, s0);
    s1 = _mm512_fmadd_pd(hi, hi, s1);
  }
  const double ss = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
  const __m512 scale = _mm512_set1_ps((float)(1.0 / std::sqrt(ss / (double)n + eps)));
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(_mm512_mul_ps(v, scale), _mm512_maskz_loadu_ps(m, w + i)));
  }
}

void silu_mul_avx512(float* gate, const float* up, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
    __m512 g = _mm512_maskz_loadu_ps(m, gate + i), u = _mm512_maskz_loadu_ps(m, up + i);
    __m512 s = _mm512_div_ps(g, _mm512_add_ps(one, vexp::exp(_mm512_sub_ps(_mm512_setzero_ps(), g))));
    _mm512_mask_storeu_ps(gate + i, m, _mm512_mul_ps(s, u));
  }
}

// Three passes over the row (max, exp and sum, scale), 16 lanes at a time; the sum in f32 lanes
// (4,096 terms in [0, 1] lose nothing that matters next to the scores' own rounding).

void softmax_scaled_avx512(float* x, int64_t n, float scale) {
  const __m512 s = _mm512_set1_ps(scale), off = _mm512_set1_ps(row_max(x, n) * scale);
  __m512 sum = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
    __m512 e = vexp::exp(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(m, x + i), s, off));
    sum = _mm512_mask_add_ps(sum, m, sum, e);
    _mm512_mask_storeu_ps(x + i, m, e);
  }
  const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), inv));
  }
}

void gelu_erf_mul_avx512(const float* value, const float* gate, float* out, int64_t n) {
  const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f), rsqrt2 = _mm512_set1_ps(0.70710678118654752f),
               p = _mm512_set1_ps(0.3275911f), a1 = _mm512_set1_ps(0.254829592f), a2 = _mm512_set1_ps(-0.284496736f),
               a3 = _mm512_set1_ps(1.421413741f), a4 = _mm512_set1_ps(-1.453152027f), a5 = _mm512_set1_ps(1.061405429f);
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
    const __m512 z = _mm512_mul_ps(g, rsqrt2), az = _mm512_abs_ps(z);
    const __m512 t = _mm512_div_ps(one, _mm512_fmadd_ps(p, az, one));
    __m512 poly = _mm512_fmadd_ps(a5, t, a4);
    poly = _mm512_fmadd_ps(poly, t, a3);
    poly = _mm512_fmadd_ps(poly, t, a2);
    poly = _mm512_fmadd_ps(poly, t, a1);
    poly = _mm512_mul_ps(poly, t);
    // erf(|z|) = 1 - poly e^{-z^2}; the sign of z put back by the odd symmetry.
    __m512 e = _mm512_fnmadd_ps(poly, vexp::exp(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_mul_ps(az, az))), one);
    e = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(e),
                                            _mm512_and_si512(_mm512_castps_si512(z), _mm512_set1_epi32((int)0x80000000u))));
    const __m512 gelu = _mm512_mul_ps(_mm512_mul_ps(half, g), _mm512_add_ps(one, e));
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, value + i), gelu));
  }
}

void channel_moments_avx512(const float* x, int64_t rows, int64_t c, const float* center, double* s1, double* s2) {
  for (int64_t r0 = 0; r0 < rows; r0 += 64) {
    const int64_t r1 = r0 + 64 < rows ? r0 + 64 : rows;
    for (int64_t ch = 0; ch < c; ch += 16) {
      const __mmask16 m = c - ch >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (c - ch)) - 1);
      const __m512 ctr = _mm512_maskz_loadu_ps(m, center + ch);
      __m512 a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps();
      for (int64_t r = r0; r < r1; r++) {
        const __m512 d = _mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + r * c + ch), ctr);
        a1 = _mm512_add_ps(a1, d);
        a2 = _mm512_fmadd_ps(d, d, a2);
      }
      alignas(64) float t1[16], t2[16];
      _mm512_store_ps(t1, a1);
      _mm512_store_ps(t2, a2);
      for (int64_t i = 0; i < 16 && ch + i < c; i++) s1[ch + i] += t1[i], s2[ch + i] += t2[i];
    }
  }
}

void channel_affine_avx512(float* x, int64_t rows, int64_t c, const float* scale, const float* shift, bool silu) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t ch = 0; ch < c; ch += 16) {
    const __mmask16 m = c - ch >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (c - ch)) - 1);
    const __m512 sc = _mm512_maskz_loadu_ps(m, scale + ch), sh = _mm512_maskz_loadu_ps(m, shift + ch);
    for (int64_t r = 0; r < rows; r++) {
      float* p = x + r * c + ch;
      __m512 v = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, p), sc, sh);
      if (silu) v = _mm512_div_ps(v, _mm512_add_ps(one, vexp::exp(_mm512_sub_ps(_mm512_setzero_ps(), v))));
      _mm512_mask_storeu_ps(p, m, v);
    }
  }
}

void gelu_tanh_avx512(float* x, int64_t n) {
  const __m512 c = _mm512_set1_ps(0.7978845608028654f), k = _mm512_set1_ps(0.044715f), half = _mm512_set1_ps(0.5f),
               one = _mm512_set1_ps(1.0f), two = _mm512_set1_ps(2.0f);
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
    __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    __m512 y = _mm512_mul_ps(c, _mm512_fmadd_ps(_mm512_mul_ps(k, v), _mm512_mul_ps(v, v), v));
    // tanh(y) = 1 - 2 / (exp(2y) + 1)
    __m512 t = _mm512_sub_ps(one, _mm512_div_ps(two, _mm512_add_ps(vexp::exp(_mm512_mul_ps(two, y)), one)));
    _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(_mm512_mul_ps(half, v), _mm512_add_ps(one, t)));
  }
}

void lowrank_add_avx512(float* y, const float* coef, const float* rows, int64_t r, int64_t n, int64_t stride) {
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
    __m512 s = _mm512_maskz_loadu_ps(m, y + i);
    for (int64_t j = 0; j < r; j++) s = _mm512_fmadd_ps(_mm512_set1_ps(coef[j]), _mm512_maskz_loadu_ps(m, rows + j * stride + i), s);
    _mm512_mask_storeu_ps(y + i, m, s);
  }
}

// bf16 -> f32 is a 16-bit shift into the high half.
void lowrank_add_bf16_avx512(float* y, const float* coef, const uint16_t* rows, int64_t r, int64_t n, int64_t stride) {
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
    __m512 s = _mm512_maskz_loadu_ps(m, y + i);
    for (int64_t j = 0; j < r; j++) {
      __m512i h = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, rows + j * stride + i));
      s = _mm512_fmadd_ps(_mm512_set1_ps(coef[j]), _mm512_castsi512_ps(_mm512_slli_epi32(h, 16)), s);
    }
    _mm512_mask_storeu_ps(y + i, m, s);
  }
}

}  // namespace kvad::kernels
