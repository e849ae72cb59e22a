// AVX2 versions of the sampler's passes (the scalar ones in sampling.cpp are the reference).
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "kernels/sampling.h"
#include "kernels/vexp.h"

namespace kvad::kernels {

// As the AVX-512 version: the maximum over full vectors (vmaxps drops a NaN in its first operand)
// and the scalar tail, then the first lane equal to it.
int64_t argmax_avx2(const float* x, int64_t n) {
  __m256 m0 = _mm256_set1_ps(-INFINITY), m1 = m0, m2 = m0, m3 = m0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
    m1 = _mm256_max_ps(_mm256_loadu_ps(x + i + 8), m1);
    m2 = _mm256_max_ps(_mm256_loadu_ps(x + i + 16), m2);
    m3 = _mm256_max_ps(_mm256_loadu_ps(x + i + 24), m3);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, _mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3)));
  float mx = -INFINITY;
  for (float v : lanes) mx = v > mx ? v : mx;
  for (; i < n; i++) mx = x[i] > mx ? x[i] : mx;
  const __m256 mv = _mm256_set1_ps(mx);
  for (i = 0; i + 8 <= n; i += 8) {
    const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), mv, _CMP_EQ_OQ));
    if (hit) return i + __builtin_ctz((unsigned)hit);
  }
  for (; i < n; i++)
    if (x[i] == mx) return i;
  return 0;  // every value NaN
}

int64_t select_at_least_avx2(const float* x, int64_t n, float t, int32_t* idx) {
  const __m256 tv = _mm256_set1_ps(t);
  int64_t k = 0, i = 0;
  for (; i + 8 <= n; i += 8) {
    unsigned hit = (unsigned)_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), tv, _CMP_GE_OQ));
    for (; hit; hit &= hit - 1) idx[k++] = (int32_t)(i + __builtin_ctz(hit));
  }
  for (; i < n; i++)
    if (x[i] >= t) idx[k++] = (int32_t)i;
  return k;
}

// Below an argument of -87.3 (where vexp::exp clamps) the weight is 0, as in the AVX-512 version.
double exp_weights_avx2(const float* x, int64_t n, float scale, float shift, float* w, float* run_sums) {
  const __m256 s = _mm256_set1_ps(scale), off = _mm256_set1_ps(shift), lowest = _mm256_set1_ps(-87.3f);
  double total = 0;
  for (int64_t r = 0; r < n; r += kWeightRun) {
    const int64_t end = r + kWeightRun < n ? r + kWeightRun : n;
    __m256 sum = _mm256_setzero_ps();
    int64_t i = r;
    for (; i + 8 <= end; i += 8) {
      const __m256 a = _mm256_fmsub_ps(_mm256_loadu_ps(x + i), s, off);
      const __m256 e = _mm256_and_ps(_mm256_cmp_ps(a, lowest, _CMP_GE_OQ), vexp::exp(a));
      sum = _mm256_add_ps(sum, e);
      _mm256_storeu_ps(w + i, e);
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, sum);
    float run = 0;
    for (float v : lanes) run += v;
    for (; i < end; i++) {
      const float a = x[i] * scale - shift;
      w[i] = a >= -87.3f ? std::exp(a) : 0.0f;
      run += w[i];
    }
    if (run_sums) run_sums[r / kWeightRun] = run;
    total += run;
  }
  return total;
}

}  // namespace kvad::kernels
