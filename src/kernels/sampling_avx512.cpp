// AVX-512 versions of the sampler's passes (the scalar ones in sampling.cpp are the reference).
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "kernels/sampling.h"
#include "kernels/vexp.h"

namespace kvad::kernels {

namespace {
inline __mmask16 tail_mask(int64_t left) { return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1); }
}  // namespace

// Two passes: the maximum (four independent vmaxps chains; vmaxps returns its second operand
// when the first is NaN, so NaNs drop out), then the first lane equal to it. The row is 600 KB
// at a 152k vocabulary, so the second pass reads it from L2.
int64_t argmax_avx512(const float* x, int64_t n) {
  __m512 m0 = _mm512_set1_ps(-INFINITY), m1 = m0, m2 = m0, m3 = m0;
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    m0 = _mm512_max_ps(_mm512_loadu_ps(x + i), m0);
    m1 = _mm512_max_ps(_mm512_loadu_ps(x + i + 16), m1);
    m2 = _mm512_max_ps(_mm512_loadu_ps(x + i + 32), m2);
    m3 = _mm512_max_ps(_mm512_loadu_ps(x + i + 48), m3);
  }
  for (; i < n; i += 16) m0 = _mm512_mask_max_ps(m0, tail_mask(n - i), _mm512_maskz_loadu_ps(tail_mask(n - i), x + i), m0);
  const __m512 mx = _mm512_set1_ps(_mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(m0, m1), _mm512_max_ps(m2, m3))));
  for (i = 0; i < n; i += 16) {
    const __mmask16 hit = _mm512_mask_cmp_ps_mask(tail_mask(n - i), _mm512_maskz_loadu_ps(tail_mask(n - i), x + i), mx, _CMP_EQ_OQ);
    if (hit) return i + __builtin_ctz(hit);
  }
  return 0;  // every value NaN
}

// Compare 16 lanes, compress the hits' indices in a register and store as many as there were:
// vpcompressd to memory is microcoded on Zen 4 (slow), to a register it is not.
int64_t select_at_least_avx512(const float* x, int64_t n, float t, int32_t* idx) {
  const __m512 tv = _mm512_set1_ps(t);
  const __m512i step = _mm512_set1_epi32(16);
  __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  int64_t k = 0;
  for (int64_t i = 0; i < n; i += 16, lanes = _mm512_add_epi32(lanes, step)) {
    const __mmask16 in = tail_mask(n - i);
    const __mmask16 hit = _mm512_mask_cmp_ps_mask(in, _mm512_maskz_loadu_ps(in, x + i), tv, _CMP_GE_OQ);
    if (!hit) continue;
    const int c = __builtin_popcount(hit);
    _mm512_mask_storeu_epi32(idx + k, (__mmask16)((1u << c) - 1), _mm512_maskz_compress_epi32(hit, lanes));
    k += c;
  }
  return k;
}

// vexp::exp clamps its argument at -87.3 (exp = 1.2e-38): below that the weight is 0 here, so a
// masked token (-inf) weighs nothing, as std::exp makes it.
double exp_weights_avx512(const float* x, int64_t n, float scale, float shift, float* w, float* run_sums) {
  const __m512 s = _mm512_set1_ps(scale), off = _mm512_set1_ps(shift), lowest = _mm512_set1_ps(-87.3f);
  double total = 0;
  for (int64_t r = 0; r < n; r += kWeightRun) {
    const int64_t end = r + kWeightRun < n ? r + kWeightRun : n;
    __m512 sum = _mm512_setzero_ps();
    for (int64_t i = r; i < end; i += 16) {
      const __mmask16 m = tail_mask(end - i);
      const __m512 a = _mm512_fmsub_ps(_mm512_maskz_loadu_ps(m, x + i), s, off);
      const __m512 e = _mm512_maskz_mov_ps(_mm512_mask_cmp_ps_mask(m, a, lowest, _CMP_GE_OQ), vexp::exp(a));
      sum = _mm512_add_ps(sum, e);
      _mm512_mask_storeu_ps(w + i, m, e);
    }
    const float run = _mm512_reduce_add_ps(sum);
    if (run_sums) run_sums[r / kWeightRun] = run;
    total += run;
  }
  return total;
}

}  // namespace kvad::kernels
