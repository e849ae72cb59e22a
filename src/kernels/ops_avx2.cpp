// AVX2 versions of the element-wise activations (the scalar ones in ops.cpp are the reference).
#include <immintrin.h>

#include <cmath>

#include "core/dtype.h"
#include "kernels/vexp.h"
#include "kernels/x86_helpers.h"

namespace kvad::kernels {

namespace {

inline float hmax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}

// max of x[0, n): two accumulators over full vectors, then the masked tail (its other lanes -inf).
float row_max(const float* x, int64_t n) {
  const __m256 ninf = _mm256_set1_ps(-INFINITY);
  __m256 mx0 = ninf, mx1 = ninf;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    mx0 = _mm256_max_ps(mx0, _mm256_loadu_ps(x + i));
    mx1 = _mm256_max_ps(mx1, _mm256_loadu_ps(x + i + 8));
  }
  for (; i < n; i += 8) {
    const __m256i m = lanes8(n - i);
    mx0 = _mm256_max_ps(mx0, _mm256_blendv_ps(ninf, _mm256_maskload_ps(x + i, m), _mm256_castsi256_ps(m)));
  }
  return hmax(_mm256_max_ps(mx0, mx1));
}

}  // namespace

// The AVX-512 file's rmsnorm: the sum of squares in double lanes.
void rmsnorm_avx2(const float* x, const float* w, float eps, int64_t n, float* out) {
  __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
  for (int64_t i = 0; i < n; i += 8) {
    const __m256 v = _mm256_maskload_ps(x + i, lanes8(n - i));
    const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v)), hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
    s0 = _mm256_fmadd_pd(lo, lo, s0);
    s1 = _mm256_fmadd_pd(hi, hi, s1);
  }
  const __m256d s = _mm256_add_pd(s0, s1);
  __m128d h = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
  const double ss = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
  const __m256 scale = _mm256_set1_ps((float)(1.0 / std::sqrt(ss / (double)n + eps)));
  for (int64_t i = 0; i < n; i += 8) {
    const __m256i m = lanes8(n - i);
    _mm256_maskstore_ps(out + i, m, _mm256_mul_ps(_mm256_mul_ps(_mm256_maskload_ps(x + i, m), scale), _mm256_maskload_ps(w + i, m)));
  }
}

// Three passes over the row (max, exp and sum, scale), as the AVX-512 file's.
void softmax_scaled_avx2(float* x, int64_t n, float scale) {
  const __m256 s = _mm256_set1_ps(scale), off = _mm256_set1_ps(row_max(x, n) * scale);
  __m256 sum = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 8) {
    const __m256i m = lanes8(n - i);
    const __m256 e = _mm256_and_ps(vexp::exp(_mm256_fmsub_ps(_mm256_maskload_ps(x + i, m), s, off)), _mm256_castsi256_ps(m));
    sum = _mm256_add_ps(sum, e);
    _mm256_maskstore_ps(x + i, m, e);
  }
  const __m256 inv = _mm256_set1_ps(1.0f / hsum256(sum));
  for (int64_t i = 0; i < n; i += 8) {
    const __m256i m = lanes8(n - i);
    _mm256_maskstore_ps(x + i, m, _mm256_mul_ps(_mm256_maskload_ps(x + i, m), inv));
  }
}

// value * GELU(gate) with erf from Abramowitz-Stegun 7.1.26, as the AVX-512 file's.
void gelu_erf_mul_avx2(const float* value, const float* gate, float* out, int64_t n) {
  const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f), rsqrt2 = _mm256_set1_ps(0.70710678118654752f),
               p = _mm256_set1_ps(0.3275911f), a1 = _mm256_set1_ps(0.254829592f), a2 = _mm256_set1_ps(-0.284496736f),
               a3 = _mm256_set1_ps(1.421413741f), a4 = _mm256_set1_ps(-1.453152027f), a5 = _mm256_set1_ps(1.061405429f);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t i = 0; i < n; i += 8) {
    const __m256i m = lanes8(n - i);
    const __m256 g = _mm256_maskload_ps(gate + i, m);
    const __m256 z = _mm256_mul_ps(g, rsqrt2), az = _mm256_andnot_ps(sign, z);
    const __m256 t = _mm256_div_ps(one, _mm256_fmadd_ps(p, az, one));
    __m256 poly = _mm256_fmadd_ps(a5, t, a4);
    poly = _mm256_fmadd_ps(poly, t, a3);
    poly = _mm256_fmadd_ps(poly, t, a2);
    poly = _mm256_fmadd_ps(poly, t, a1);
    poly = _mm256_mul_ps(poly, t);
    __m256 e = _mm256_fnmadd_ps(poly, vexp::exp(_mm256_sub_ps(_mm256_setzero_ps(), _mm256_mul_ps(az, az))), one);
    e = _mm256_or_ps(e, _mm256_and_ps(z, sign));
    const __m256 gelu = _mm256_mul_ps(_mm256_mul_ps(half, g), _mm256_add_ps(one, e));
    _mm256_maskstore_ps(out + i, m, _mm256_mul_ps(_mm256_maskload_ps(value + i, m), gelu));
  }
}

// A GroupNorm's per-channel sums of (x - center) and its square over rows, 64 rows at a time in
// f32 lanes and then into the double totals, as the AVX-512 file's.
void channel_moments_avx2(const float* x, int64_t rows, int64_t c, const float* center, double* s1, double* s2) {
  for (int64_t r0 = 0; r0 < rows; r0 += 64) {
    const int64_t r1 = r0 + 64 < rows ? r0 + 64 : rows;
    for (int64_t ch = 0; ch < c; ch += 8) {
      const __m256i m = lanes8(c - ch);
      const __m256 ctr = _mm256_maskload_ps(center + ch, m);
      __m256 a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps();
      for (int64_t r = r0; r < r1; r++) {
        const __m256 d = _mm256_sub_ps(_mm256_maskload_ps(x + r * c + ch, m), ctr);
        a1 = _mm256_add_ps(a1, d);
        a2 = _mm256_fmadd_ps(d, d, a2);
      }
      alignas(32) float t1[8], t2[8];
      _mm256_store_ps(t1, a1);
      _mm256_store_ps(t2, a2);
      for (int64_t i = 0; i < 8 && ch + i < c; i++) s1[ch + i] += t1[i], s2[ch + i] += t2[i];
    }
  }
}

void channel_affine_avx2(float* x, int64_t rows, int64_t c, const float* scale, const float* shift, bool silu) {
  const __m256 one = _mm256_set1_ps(1.0f);
  for (int64_t ch = 0; ch < c; ch += 8) {
    const __m256i m = lanes8(c - ch);
    const __m256 sc = _mm256_maskload_ps(scale + ch, m), sh = _mm256_maskload_ps(shift + ch, m);
    for (int64_t r = 0; r < rows; r++) {
      float* p = x + r * c + ch;
      __m256 v = _mm256_fmadd_ps(_mm256_maskload_ps(p, m), sc, sh);
      if (silu) v = _mm256_div_ps(v, _mm256_add_ps(one, vexp::exp(_mm256_sub_ps(_mm256_setzero_ps(), v))));
      _mm256_maskstore_ps(p, m, v);
    }
  }
}

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
