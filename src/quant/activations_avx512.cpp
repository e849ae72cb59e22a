// AVX-512 activation quantisation: the same arithmetic as the scalar reference (amax, 127/amax,
// round to nearest even, saturate), so the codes are bit-identical.
#include <immintrin.h>

#include <cstdint>

namespace kvad {

// One full 32-wide block: codes into q, returns sum(q); *scale = amax / 127.
int32_t quantize_block32_avx512(const float* x, int8_t* q, float* scale) {
  __m512 a = _mm512_loadu_ps(x), b = _mm512_loadu_ps(x + 16);
  __m512 amax = _mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b));
  float m = _mm512_reduce_max_ps(amax);
  *scale = m / 127.0f;
  float inv = m > 0 ? 127.0f / m : 0.0f;
  __m512 vi = _mm512_set1_ps(inv);
  __m512i qa = _mm512_cvtps_epi32(_mm512_mul_ps(a, vi)), qb = _mm512_cvtps_epi32(_mm512_mul_ps(b, vi));
  _mm_storeu_si128((__m128i*)q, _mm512_cvtsepi32_epi8(qa));
  _mm_storeu_si128((__m128i*)(q + 16), _mm512_cvtsepi32_epi8(qb));
  return _mm512_reduce_add_epi32(_mm512_add_epi32(qa, qb));
}

}  // namespace kvad
