// AVX2 Q8_K activation quantisation (quant/kquant.h, quantize_kacts): the scalar reference's
// arithmetic, as the AVX-512 file's, so the codes, sums and d are bit-identical to it and to
// llama.cpp's quantize_row_q8_K.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace kvad {

// One block of 256 values: codes into q, their sums per 16 and per 32; returns d (0 for zeros).
float quantize_kblock_avx2(const float* x, int8_t* q, int16_t* bsums, int16_t* sums32) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 vmax = _mm256_setzero_ps();
  for (int c = 0; c < 32; c++) vmax = _mm256_max_ps(vmax, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * c)));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  const float amax = _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
  if (amax == 0) {
    std::memset(q, 0, 256);
    std::memset(bsums, 0, 32);
    std::memset(sums32, 0, 16);
    return 0;
  }
  float mx = 0;  // the first value of largest magnitude, with its sign
  for (int c = 0; c < 32; c++) {
    const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * c)), _mm256_set1_ps(amax), _CMP_EQ_OQ));
    if (hit) {
      mx = x[8 * c + __builtin_ctz((unsigned)hit)];
      break;
    }
  }
  const float iscale = -127.f / mx;
  const __m256 vs = _mm256_set1_ps(iscale);
  const __m256i top = _mm256_set1_epi32(127);
  for (int c = 0; c < 16; c++) {  // 16 values at a time: one bsum each
    const __m256i a = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 16 * c), vs)), top);
    const __m256i b = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 16 * c + 8), vs)), top);
    // int32 -> int8 (-128 < code <= 127): the packs work per 128-bit half, hence the reorder.
    const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
    const __m128i z = _mm_packs_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1));
    _mm_storeu_si128((__m128i*)(q + 16 * c), _mm_packs_epi16(w, z));
    const __m256i s = _mm256_add_epi32(a, b);
    __m128i t = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4E));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xB1));
    bsums[c] = (int16_t)_mm_cvtsi128_si32(t);
  }
  for (int j = 0; j < 8; j++) sums32[j] = (int16_t)(bsums[2 * j] + bsums[2 * j + 1]);
  return 1 / iscale;
}

}  // namespace kvad
