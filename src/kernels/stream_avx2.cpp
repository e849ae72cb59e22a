#include <immintrin.h>

#include "kernels/stream.h"

namespace kvad::kernels {

uint64_t stream_read_avx2(const uint8_t* p, size_t n) {
  __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
  for (size_t i = 0; i + 128 <= n; i += 128) {
    a = _mm256_add_epi64(a, _mm256_loadu_si256((const __m256i*)(p + i)));
    b = _mm256_add_epi64(b, _mm256_loadu_si256((const __m256i*)(p + i + 32)));
    c = _mm256_add_epi64(c, _mm256_loadu_si256((const __m256i*)(p + i + 64)));
    d = _mm256_add_epi64(d, _mm256_loadu_si256((const __m256i*)(p + i + 96)));
  }
  __m256i s = _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d));
  alignas(32) uint64_t v[4];
  _mm256_store_si256((__m256i*)v, s);
  return v[0] + v[1] + v[2] + v[3];
}

}  // namespace kvad::kernels
