// AVX-512 micro-tiles of gemm.h: 12 rows x 32 outputs in 24 accumulators (f32: one FMA per row and
// half-panel per k; bf16: one vdpbf16ps per row and half-panel per pair of k).
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "kernels/gemm.h"

namespace kvad::kernels {

namespace {

constexpr int64_t kPanel = 32, kRows = 12, kDepth = 256;

inline __mmask16 lanes(int64_t n) { return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1); }

// A tile's accumulators from c (or zero when `first`), and back.
template <int MR>
__attribute__((always_inline)) inline void load_tile(__m512* c0, __m512* c1, const float* c, int64_t ldc, __mmask16 m0, __mmask16 m1, bool first) {
#pragma GCC unroll 12
  for (int r = 0; r < MR; r++) {
    c0[r] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m0, c + r * ldc);
    c1[r] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m1, c + r * ldc + 16);
  }
}

template <int MR>
__attribute__((always_inline)) inline void store_tile(const __m512* c0, const __m512* c1, float* c, int64_t ldc, __mmask16 m0, __mmask16 m1) {
#pragma GCC unroll 12
  for (int r = 0; r < MR; r++) {
    _mm512_mask_storeu_ps(c + r * ldc, m0, c0[r]);
    _mm512_mask_storeu_ps(c + r * ldc + 16, m1, c1[r]);
  }
}

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

// Rows [r0, r1) in tiles of 12 (the last one shorter) by panel p over depth [k0, k0 + kc).
template <typename Tile>
inline void rows_by_panel(int64_t r0, int64_t r1, const Tile& tile) {
  int64_t r = r0;
  for (; r + kRows <= r1; r += kRows) tile(r, std::integral_constant<int, 12>{});
  switch (r1 - r) {
    case 11: tile(r, std::integral_constant<int, 11>{}); break;
    case 10: tile(r, std::integral_constant<int, 10>{}); break;
    case 9: tile(r, std::integral_constant<int, 9>{}); break;
    case 8: tile(r, std::integral_constant<int, 8>{}); break;
    case 7: tile(r, std::integral_constant<int, 7>{}); break;
    case 6: tile(r, std::integral_constant<int, 6>{}); break;
    case 5: tile(r, std::integral_constant<int, 5>{}); break;
    case 4: tile(r, std::integral_constant<int, 4>{}); break;
    case 3: tile(r, std::integral_constant<int, 3>{}); break;
    case 2: tile(r, std::integral_constant<int, 2>{}); break;
    case 1: tile(r, std::integral_constant<int, 1>{}); break;
    default: break;
  }
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

void gemm_block_bf16_avx512(const uint16_t* a, int64_t kp, const PackedWeight& w, int64_t r0, int64_t r1, int64_t p0,
                            int64_t p1, float* c) {
  const int64_t k2 = kp / 2, m = w.m;
  for (int64_t q0 = 0; q0 < k2; q0 += kDepth / 2) {
    const int64_t kc2 = std::min(kDepth / 2, k2 - q0);
    for (int64_t p = p0; p < p1; p++) {
      const __mmask16 m0 = lanes(m - p * kPanel), m1 = lanes(m - p * kPanel - 16);
      const uint16_t* b = w.b16.data() + (p * k2 + q0) * kPanel * 2;
      rows_by_panel(r0, r1, [&](int64_t r, auto mr) {
        tile_bf16<decltype(mr)::value>(a + r * kp + 2 * q0, kp, b, kc2, c + r * m + p * kPanel, m, m0, m1, q0 == 0);
      });
    }
  }
}

}  // namespace kvad::kernels
