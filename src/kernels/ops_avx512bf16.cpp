// The AVX-512 element-wise kernels that store bf16 with AVX512-BF16's vcvtne2ps2bf16: only where
// avx512_bf16_enabled() (core/cpu.h). The rest are ops_avx512.cpp's, compiled without BF16.
#include <immintrin.h>

#include <cstdint>

#include "kernels/vexp.h"
#include "kernels/x86_helpers.h"

namespace kvad::kernels {

float softmax_numerators_bf16_avx512(const float* x, int64_t n, float scale, uint16_t* out, int64_t n_out) {
  const __m512 s = _mm512_set1_ps(scale), off = _mm512_set1_ps(row_max(x, n) * scale);
  auto numerator = [&](__m512 xv) { return vexp::exp_nonpositive_deg4(_mm512_fmsub_ps(xv, s, off)); };
  __m512 sum0 = _mm512_setzero_ps(), sum1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 e0 = numerator(_mm512_loadu_ps(x + i)), e1 = numerator(_mm512_loadu_ps(x + i + 16));
    sum0 = _mm512_add_ps(sum0, e0);
    sum1 = _mm512_add_ps(sum1, e1);
    _mm512_storeu_si512(out + i, (__m512i)_mm512_cvtne2ps_pbh(e1, e0));
  }
  for (; i < n_out; i += 16) {
    const int64_t left = n - i;
    const __mmask16 m = left >= 16 ? (__mmask16)0xFFFF : left <= 0 ? (__mmask16)0 : (__mmask16)((1u << left) - 1);
    const __m512 e = _mm512_maskz_mov_ps(m, numerator(_mm512_maskz_loadu_ps(m, x + i)));
    sum0 = _mm512_add_ps(sum0, e);
    const __mmask16 sm = n_out - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n_out - i)) - 1);
    _mm256_mask_storeu_epi16(out + i, sm, (__m256i)_mm512_cvtneps_pbh(e));
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(sum0, sum1));
}

}  // namespace kvad::kernels
