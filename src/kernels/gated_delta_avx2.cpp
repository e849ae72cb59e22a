// AVX2 versions of the gated DeltaNet's row loops (gated_delta.cpp has the scalar references): as
// the AVX-512 file, 32 columns (four registers) at a time.
#include <immintrin.h>

#include <cstdint>

#include "kernels/vexp.h"
#include "kernels/x86_helpers.h"

namespace kvad::kernels {

namespace {

__m256 silu(__m256 x) {
  return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), vexp::exp(_mm256_sub_ps(_mm256_setzero_ps(), x))));
}

}  // namespace

void delta_decay_project_avx2(float* S, int64_t dk, int64_t dv, float decay, const float* k, float* mem) {
  const __m256 d = _mm256_set1_ps(decay);
  for (int64_t c0 = 0; c0 < dv; c0 += 32) {
    const __m256i m[4] = {lanes8(dv - c0), lanes8(dv - c0 - 8), lanes8(dv - c0 - 16), lanes8(dv - c0 - 24)};
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t a = 0; a < dk; a++) {
      float* row = S + a * dv + c0;
      const __m256 ka = _mm256_set1_ps(k[a]);
#pragma GCC unroll 4
      for (int i = 0; i < 4; i++) {
        const __m256 s = _mm256_mul_ps(_mm256_maskload_ps(row + 8 * i, m[i]), d);
        _mm256_maskstore_ps(row + 8 * i, m[i], s);
        acc[i] = _mm256_fmadd_ps(s, ka, acc[i]);
      }
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) _mm256_maskstore_ps(mem + c0 + 8 * i, m[i], acc[i]);
  }
}

void delta_update_read_avx2(float* S, int64_t dk, int64_t dv, const float* k, const float* delta, const float* q,
                            float* o) {
  for (int64_t c0 = 0; c0 < dv; c0 += 32) {
    const __m256i m[4] = {lanes8(dv - c0), lanes8(dv - c0 - 8), lanes8(dv - c0 - 16), lanes8(dv - c0 - 24)};
    __m256 dl[4], acc[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) dl[i] = _mm256_maskload_ps(delta + c0 + 8 * i, m[i]), acc[i] = _mm256_setzero_ps();
    for (int64_t a = 0; a < dk; a++) {
      float* row = S + a * dv + c0;
      const __m256 ka = _mm256_set1_ps(k[a]), qa = _mm256_set1_ps(q[a]);
#pragma GCC unroll 4
      for (int i = 0; i < 4; i++) {
        const __m256 s = _mm256_fmadd_ps(ka, dl[i], _mm256_maskload_ps(row + 8 * i, m[i]));
        _mm256_maskstore_ps(row + 8 * i, m[i], s);
        acc[i] = _mm256_fmadd_ps(s, qa, acc[i]);
      }
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) _mm256_maskstore_ps(o + c0 + 8 * i, m[i], acc[i]);
  }
}

void delta_conv_step_avx2(const float* taps, int64_t K, int64_t nc, float* x, float* win, int64_t C) {
  for (int64_t c = 0; c < nc; c += 8) {
    const __m256i m = lanes8(nc - c);
    const __m256 xv = _mm256_maskload_ps(x + c, m);
    __m256 acc = _mm256_mul_ps(_mm256_maskload_ps(taps + (K - 1) * nc + c, m), xv);
    for (int64_t j = 0; j < K - 1; j++)
      acc = _mm256_fmadd_ps(_mm256_maskload_ps(taps + j * nc + c, m), _mm256_maskload_ps(win + j * C + c, m), acc);
    for (int64_t j = 0; j + 1 < K - 1; j++) _mm256_maskstore_ps(win + j * C + c, m, _mm256_maskload_ps(win + (j + 1) * C + c, m));
    if (K > 1) _mm256_maskstore_ps(win + (K - 2) * C + c, m, xv);
    _mm256_maskstore_ps(x + c, m, silu(acc));
  }
}

void delta_gate_avx2(float* o, const float* z, const float* norm, float inv, int64_t n) {
  const __m256 s = _mm256_set1_ps(inv);
  for (int64_t i = 0; i < n; i += 8) {
    const __m256i m = lanes8(n - i);
    const __m256 v = _mm256_mul_ps(_mm256_mul_ps(_mm256_maskload_ps(o + i, m), s), _mm256_maskload_ps(norm + i, m));
    _mm256_maskstore_ps(o + i, m, _mm256_mul_ps(v, silu(_mm256_maskload_ps(z + i, m))));
  }
}

}  // namespace kvad::kernels
