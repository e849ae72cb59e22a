// The AVX512-BF16 micro-tile of gemm.h (frame in gemm_tiles_avx512.h): one vdpbf16ps per row and
// half-panel per pair of k, and the activations' rounding to bf16 with vcvtneps2bf16. Only for
// CPUs with AVX512-BF16 (avx512_bf16_enabled(), core/cpu.h); without it gemm.cpp takes
// gemm_avx512.cpp's widening tile.
#include <immintrin.h>

#include <algorithm>

#include "kernels/gemm.h"
#include "kernels/gemm_tiles_avx512.h"

namespace kvad::kernels {

namespace {

// The same over pairs of k: a row's two bf16 values broadcast as one 32-bit lane.
template <int MR>
inline void tile_bf16(const uint16_t* a, int64_t lda, const uint16_t* b, int64_t kc2, float* c, int64_t ldc,
                      __mmask16 m0, __mmask16 m1, bool first) {
  __m512 c0[MR], c1[MR];
  load_tile<MR>(c0, c1, c, ldc, m0, m1, first);
  for (int64_t i = 0; i < kc2; i++) {
    const __m512i b0 = _mm512_loadu_si512(b + i * 2 * kPanel), b1 = _mm512_loadu_si512(b + i * 2 * kPanel + kPanel);
#pragma GCC unroll 12
    for (int r = 0; r < MR; r++) {
      int32_t pair;
      __builtin_memcpy(&pair, a + r * lda + 2 * i, 4);
      const __m512i av = _mm512_set1_epi32(pair);
      c0[r] = _mm512_dpbf16_ps(c0[r], (__m512bh)av, (__m512bh)b0);
      c1[r] = _mm512_dpbf16_ps(c1[r], (__m512bh)av, (__m512bh)b1);
    }
  }
  store_tile<MR>(c0, c1, c, ldc, m0, m1);
}

}  // namespace

void bf16_rows_avx512(const float* x, int64_t n, int64_t k, int64_t kp, uint16_t* out) {
  for (int64_t t = 0; t < n; t++) {
    const float* xr = x + t * k;
    uint16_t* o = out + t * kp;
    for (int64_t i = 0; i < kp; i += 16) {
      const int64_t left = k - i;
      const __mmask16 m = left >= 16 ? (__mmask16)0xFFFF : left <= 0 ? (__mmask16)0 : (__mmask16)((1u << left) - 1);
      __m256bh h = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, xr + i));
      // kp need not be a multiple of 16 (gemm pads k to even only): never past the row's end.
      const __mmask16 sm = kp - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (kp - i)) - 1);
      _mm256_mask_storeu_epi16(o + i, sm, (__m256i)h);
    }
  }
}

void gemm_block_bf16_avx512(const uint16_t* a, int64_t kp, const PackedWeight& w, int64_t r0, int64_t r1, int64_t p0,
                            int64_t p1, float* c) {
  bf16_panel_blocks(kp / 2, w, r0, r1, p0, p1, [&](int64_t r, auto mr, int64_t q0, int64_t kc2, const uint16_t* b, int64_t p,
                                                   __mmask16 m0, __mmask16 m1) {
    tile_bf16<decltype(mr)::value>(a + r * kp + 2 * q0, kp, b, kc2, c + r * w.m + p * kPanel, w.m, m0, m1, q0 == 0);
  });
}

}  // namespace kvad::kernels
