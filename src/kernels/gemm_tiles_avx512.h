// The AVX-512 micro-tile's frame shared by gemm_avx512.cpp (f32 products) and
// gemm_avx512bf16.cpp (vdpbf16ps): 12 rows x 32 outputs in 24 accumulators, loaded from and
// stored to C, and rows walked in tiles of 12. Include only from files compiled for AVX-512; the
// functions have internal linkage for the reason kernels/x86_helpers.h gives.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
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

// A bf16-panel product's rows [r0, r1) x panels [p0, p1) over k2 pairs of k, the pairs in blocks
// of kDepth / 2: tile(r, mr, q0, kc2, b, p, m0, m1) for each tile of mr rows at row r, its pairs
// [q0, q0 + kc2), panel p's block at b, and p's output masks.
template <typename Tile>
inline void bf16_panel_blocks(int64_t k2, const PackedWeight& w, int64_t r0, int64_t r1, int64_t p0, int64_t p1,
                              const Tile& tile) {
  for (int64_t q0 = 0; q0 < k2; q0 += kDepth / 2) {
    const int64_t kc2 = std::min(kDepth / 2, k2 - q0);
    for (int64_t p = p0; p < p1; p++) {
      const __mmask16 m0 = lanes(w.m - p * kPanel), m1 = lanes(w.m - p * kPanel - 16);
      const uint16_t* b = w.b16.data() + (p * k2 + q0) * kPanel * 2;
      rows_by_panel(r0, r1, [&](int64_t r, auto mr) { tile(r, mr, q0, kc2, b, p, m0, m1); });
    }
  }
}

}  // namespace
}  // namespace kvad::kernels
