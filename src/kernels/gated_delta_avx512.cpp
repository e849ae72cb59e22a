// AVX-512 versions of the gated DeltaNet's row loops (gated_delta.cpp has the scalar references and
// what each computes). S's rows are value_dim wide: 64 columns (four registers of accumulators) at a
// time, each column summing over the key rows in the reference's order.
#include <immintrin.h>

#include <cstdint>

#include "kernels/vexp.h"

namespace kvad::kernels {

namespace {

__mmask16 lanes16(int64_t left) { return left >= 16 ? (__mmask16)0xFFFF : left <= 0 ? (__mmask16)0 : (__mmask16)((1u << left) - 1); }

__m512 silu(__m512 x) {
  return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), vexp::exp(_mm512_sub_ps(_mm512_setzero_ps(), x))));
}

}  // namespace

void delta_decay_project_avx512(float* S, int64_t dk, int64_t dv, float decay, const float* k, float* mem) {
  const __m512 d = _mm512_set1_ps(decay);
  for (int64_t c0 = 0; c0 < dv; c0 += 64) {
    const __mmask16 m[4] = {lanes16(dv - c0), lanes16(dv - c0 - 16), lanes16(dv - c0 - 32), lanes16(dv - c0 - 48)};
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    for (int64_t a = 0; a < dk; a++) {
      float* row = S + a * dv + c0;
      const __m512 ka = _mm512_set1_ps(k[a]);
#pragma GCC unroll 4
      for (int i = 0; i < 4; i++) {
        const __m512 s = _mm512_mul_ps(_mm512_maskz_loadu_ps(m[i], row + 16 * i), d);
        _mm512_mask_storeu_ps(row + 16 * i, m[i], s);
        acc[i] = _mm512_fmadd_ps(s, ka, acc[i]);
      }
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) _mm512_mask_storeu_ps(mem + c0 + 16 * i, m[i], acc[i]);
  }
}

void delta_update_read_avx512(float* S, int64_t dk, int64_t dv, const float* k, const float* delta, const float* q,
                              float* o) {
  for (int64_t c0 = 0; c0 < dv; c0 += 64) {
    const __mmask16 m[4] = {lanes16(dv - c0), lanes16(dv - c0 - 16), lanes16(dv - c0 - 32), lanes16(dv - c0 - 48)};
    __m512 dl[4], acc[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) dl[i] = _mm512_maskz_loadu_ps(m[i], delta + c0 + 16 * i), acc[i] = _mm512_setzero_ps();
    for (int64_t a = 0; a < dk; a++) {
      float* row = S + a * dv + c0;
      const __m512 ka = _mm512_set1_ps(k[a]), qa = _mm512_set1_ps(q[a]);
#pragma GCC unroll 4
      for (int i = 0; i < 4; i++) {
        const __m512 s = _mm512_fmadd_ps(ka, dl[i], _mm512_maskz_loadu_ps(m[i], row + 16 * i));
        _mm512_mask_storeu_ps(row + 16 * i, m[i], s);
        acc[i] = _mm512_fmadd_ps(s, qa, acc[i]);
      }
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) _mm512_mask_storeu_ps(o + c0 + 16 * i, m[i], acc[i]);
  }
}

void delta_conv_step_avx512(const float* taps, int64_t K, int64_t nc, float* x, float* win, int64_t C) {
  for (int64_t c = 0; c < nc; c += 16) {
    const __mmask16 m = lanes16(nc - c);
    const __m512 xv = _mm512_maskz_loadu_ps(m, x + c);
    __m512 acc = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, taps + (K - 1) * nc + c), xv);
    for (int64_t j = 0; j < K - 1; j++)
      acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, taps + j * nc + c), _mm512_maskz_loadu_ps(m, win + j * C + c), acc);
    for (int64_t j = 0; j + 1 < K - 1; j++) _mm512_mask_storeu_ps(win + j * C + c, m, _mm512_maskz_loadu_ps(m, win + (j + 1) * C + c));
    if (K > 1) _mm512_mask_storeu_ps(win + (K - 2) * C + c, m, xv);
    _mm512_mask_storeu_ps(x + c, m, silu(acc));
  }
}

void delta_gate_avx512(float* o, const float* z, const float* norm, float inv, int64_t n) {
  const __m512 s = _mm512_set1_ps(inv);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = lanes16(n - i);
    const __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, o + i), s), _mm512_maskz_loadu_ps(m, norm + i));
    _mm512_mask_storeu_ps(o + i, m, _mm512_mul_ps(v, silu(_mm512_maskz_loadu_ps(m, z + i))));
  }
}

}  // namespace kvad::kernels
