// AVX-512 Q8_K activation quantisation (quant/kquant.h, quantize_kacts): the scalar reference's
// arithmetic (the first value of largest magnitude sets the sign, iscale = -127 / it, round to
// nearest even, clamp at 127), so the codes, sums and d are bit-identical to it and to
// llama.cpp's quantize_row_q8_K.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace kvad {

// One block of 256 values: codes into q, their sums per 16 and per 32; returns d (0 for zeros).
float quantize_kblock_avx512(const float* x, int8_t* q, int16_t* bsums, int16_t* sums32) {
  __m512 vmax = _mm512_setzero_ps();
  for (int c = 0; c < 16; c++) vmax = _mm512_max_ps(vmax, _mm512_abs_ps(_mm512_loadu_ps(x + 16 * c)));
  const float amax = _mm512_reduce_max_ps(vmax);
  if (amax == 0) {
    std::memset(q, 0, 256);
    std::memset(bsums, 0, 32);
    std::memset(sums32, 0, 16);
    return 0;
  }
  float mx = 0;
  for (int c = 0; c < 16; c++) {
    const __mmask16 hit = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(x + 16 * c)), _mm512_set1_ps(amax), _CMP_EQ_OQ);
    if (hit) {
      mx = x[16 * c + __builtin_ctz(hit)];
      break;
    }
  }
  const float iscale = -127.f / mx;
  const __m512 vs = _mm512_set1_ps(iscale);
  const __m512i top = _mm512_set1_epi32(127);
  for (int c = 0; c < 16; c++) {
    const __m512i v = _mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + 16 * c), vs)), top);
    _mm_storeu_si128((__m128i*)(q + 16 * c), _mm512_cvtepi32_epi8(v));
    bsums[c] = (int16_t)_mm512_reduce_add_epi32(v);
  }
  for (int j = 0; j < 8; j++) sums32[j] = (int16_t)(bsums[2 * j] + bsums[2 * j + 1]);
  return 1 / iscale;
}

}  // namespace kvad
