// AVX2 q8/q4 activation quantisation (quant/activations.h): the scalar reference's arithmetic (the
// same float scale, products and round to nearest even), so the codes, scales and sums are
// bit-identical to it.
#include <immintrin.h>

#include <cstdint>

namespace kvad {

int32_t quantize_block32_avx2(const float* x, int8_t* q, float* scale) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 v[4], amax = _mm256_setzero_ps();
  for (int c = 0; c < 4; c++) {
    v[c] = _mm256_loadu_ps(x + 8 * c);
    amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[c]));
  }
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  const float m = _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
  *scale = m / 127.0f;
  const __m256 inv = _mm256_set1_ps(m > 0 ? 127.0f / m : 0.0f);
  __m256i c32[4];
  for (int c = 0; c < 4; c++) c32[c] = _mm256_cvtps_epi32(_mm256_mul_ps(v[c], inv));
  // int32 -> int8 (|code| <= 127: no saturation); the packs work per 128-bit half, the permute
  // puts the dwords back in order.
  const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(c32[0], c32[1]), _mm256_packs_epi32(c32[2], c32[3]));
  _mm256_storeu_si256((__m256i*)q, _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  const __m256i s = _mm256_add_epi32(_mm256_add_epi32(c32[0], c32[1]), _mm256_add_epi32(c32[2], c32[3]));
  __m128i t = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4E));
  t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xB1));
  return _mm_cvtsi128_si32(t);
}

}  // namespace kvad
