// AVX-512 micro-tiles of gemm.h (frame in gemm_tiles_avx512.h): f32 panels, one FMA per row and
// half-panel per k; bf16 panels widened to f32 in registers for CPUs without AVX512-BF16, whose
// vdpbf16ps tile is gemm_avx512bf16.cpp.
#include <immintrin.h>

#include <algorithm>

#include "kernels/gemm.h"
#include "kernels/gemm_tiles_avx512.h"

namespace kvad::kernels {

namespace {

// c[MR rows][32] (+)= a[MR rows][kc] x panel[kc][32]; `first`: c is overwritten, not added to.
template <int MR>
inline void tile_f32(const float* a, int64_t lda, const float* b, int64_t kc, float* c, int64_t ldc, __mmask16 m0,
                     __mmask16 m1, bool first) {
  __m512 c0[MR], c1[MR];
  load_tile<MR>(c0, c1, c, ldc, m0, m1, first);
  for (int64_t i = 0; i < kc; i++) {
    const __m512 b0 = _mm512_loadu_ps(b + i * kPanel), b1 = _mm512_loadu_ps(b + i * kPanel + 16);
#pragma GCC unroll 12
    for (int r = 0; r < MR; r++) {
      const __m512 av = _mm512_set1_ps(a[r * lda + i]);
      c0[r] = _mm512_fmadd_ps(av, b0, c0[r]);
      c1[r] = _mm512_fmadd_ps(av, b1, c1[r]);
    }
  }
  store_tile<MR>(c0, c1, c, ldc, m0, m1);
}

// The same over bf16 panels on a CPU without AVX512-BF16 (Ice Lake, Cascade Lake): pair i's 32
// dwords hold each output's (k = 2i, 2i + 1), the even k in the low half; a bf16 is the top half
// of an f32, so a shift widens the even k and a mask the odd one. The activations are f32 already
// rounded to bf16, so the products are the bf16 operands' as vdpbf16ps's; only the order of the
// f32 additions differs. 24 accumulators and the pair's four widened registers fit the 32.
template <int MR>
inline void tile_bf16w(const float* a, int64_t lda, const uint16_t* b, int64_t kc2, float* c, int64_t ldc, __mmask16 m0,
                       __mmask16 m1, bool first) {
  __m512 c0[MR], c1[MR];
  load_tile<MR>(c0, c1, c, ldc, m0, m1, first);
  const __m512i top = _mm512_set1_epi32((int)0xFFFF0000u);
  for (int64_t i = 0; i < kc2; i++) {
    const __m512i v0 = _mm512_loadu_si512(b + i * 2 * kPanel), v1 = _mm512_loadu_si512(b + i * 2 * kPanel + kPanel);
    const __m512 e0 = _mm512_castsi512_ps(_mm512_slli_epi32(v0, 16)), e1 = _mm512_castsi512_ps(_mm512_slli_epi32(v1, 16));
    const __m512 o0 = _mm512_castsi512_ps(_mm512_and_si512(v0, top)), o1 = _mm512_castsi512_ps(_mm512_and_si512(v1, top));
#pragma GCC unroll 12
    for (int r = 0; r < MR; r++) {
      const __m512 even = _mm512_set1_ps(a[r * lda + 2 * i]), odd = _mm512_set1_ps(a[r * lda + 2 * i + 1]);
      c0[r] = _mm512_fmadd_ps(odd, o0, _mm512_fmadd_ps(even, e0, c0[r]));
      c1[r] = _mm512_fmadd_ps(odd, o1, _mm512_fmadd_ps(even, e1, c1[r]));
    }
  }
  store_tile<MR>(c0, c1, c, ldc, m0, m1);
}

}  // namespace

void gemm_block_f32_avx512(const float* a, const PackedWeight& w, int64_t r0, int64_t r1, int64_t p0, int64_t p1, float* c,
                           int64_t panel_k) {
  const int64_t k = w.k, m = w.m, depth = panel_k > 0 ? panel_k : k;
  for (int64_t k0 = 0; k0 < k; k0 += kDepth) {
    const int64_t kc = std::min(kDepth, k - k0);
    for (int64_t p = p0; p < p1; p++) {
      const __mmask16 m0 = lanes(m - p * kPanel), m1 = lanes(m - p * kPanel - 16);
      const float* b = w.f32.data() + (p * depth + k0) * kPanel;
      rows_by_panel(r0, r1, [&](int64_t r, auto mr) {
        tile_f32<decltype(mr)::value>(a + r * k + k0, k, b, kc, c + r * m + p * kPanel, m, m0, m1, k0 == 0);
      });
    }
  }
}

void gemm_block_bf16w_avx512(const float* a, int64_t lda, const PackedWeight& w, int64_t r0, int64_t r1, int64_t p0,
                             int64_t p1, float* c) {
  bf16_panel_blocks((w.k + 1) / 2, w, r0, r1, p0, p1, [&](int64_t r, auto mr, int64_t q0, int64_t kc2, const uint16_t* b,
                                                          int64_t p, __mmask16 m0, __mmask16 m1) {
    tile_bf16w<decltype(mr)::value>(a + r * lda + 2 * q0, lda, b, kc2, c + r * w.m + p * kPanel, w.m, m0, m1, q0 == 0);
  });
}

}  // namespace kvad::kernels
