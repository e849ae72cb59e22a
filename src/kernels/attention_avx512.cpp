#include <immintrin.h>

#include "kernels/attention_impl.h"

namespace kvad::kernels {

namespace {
struct Avx512Vec {
  static float dot(const float* a, const float* b, int n) {
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    int i = 0;
    for (; i + 32 <= n; i += 32) {
      s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
      s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
    }
    for (; i < n; i += 16) {
      __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
      s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), s0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
  }
  static void axpy(float* y, float a, const float* x, int n) {
    __m512 av = _mm512_set1_ps(a);
    for (int i = 0; i < n; i += 16) {
      __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
      __m512 yv = _mm512_maskz_loadu_ps(m, y + i);
      _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(m, x + i), yv));
    }
  }
};
}  // namespace

void attention_avx512(const float* q, int64_t n, int64_t pos0, const AttentionShape& s, const float* k, const float* v,
                      int64_t head_stride, float* out) {
  detail::attention_impl<Avx512Vec>(q, n, pos0, s, k, v, head_stride, out);
}

}  // namespace kvad::kernels
