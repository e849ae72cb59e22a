#include <immintrin.h>

#include "kernels/attention_impl.h"

namespace kvad::kernels {

namespace {
struct Avx2Vec {
  static float dot(const float* a, const float* b, int n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
      s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
      s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s0 = _mm256_add_ps(s0, s1);
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(s0), _mm256_extractf128_ps(s0, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    float s = _mm_cvtss_f32(r);
    for (; i < n; i++) s += a[i] * b[i];
    return s;
  }
  static void axpy(float* y, float a, const float* x, int n) {
    __m256 av = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * x[i];
  }
};
}  // namespace

void attention_avx2(const float* q, int64_t n, int64_t pos0, const AttentionShape& s, const float* k, const float* v,
                    int64_t head_stride, float* out) {
  detail::attention_impl<Avx2Vec>(q, n, pos0, s, k, v, head_stride, out);
}

}  // namespace kvad::kernels
