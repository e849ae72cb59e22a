// AVX2 micro-tiles of gemm.h: 6 rows x 16 outputs (half a 32-wide panel) in 12 accumulators, two
// loads of the panel and 6 broadcasts feeding 12 FMAs per k, with 16 registers in all. Without
// AVX512-BF16 a bf16 panel is widened in registers (a bf16 is the top half of an f32: a shift for
// the even k of a pair, a mask for the odd one; a block's even k in one pass, its odd k in the
// next) and multiplied in f32 by activations already rounded to bf16, so the products are those
// of the bf16 operands, as on AVX-512; only the order of the f32 additions differs.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "kernels/gemm.h"
#include "kernels/x86_helpers.h"

namespace kvad::kernels {

namespace {

constexpr int64_t kPanel = 32, kHalf = 16, kRows = 6, kDepth = 256;

// c[MR rows][16] (+)= over kc steps: a's values (f32) times the half panel's. `weights(i, b0, b1)`
// gives step i's 16 weights as two registers; `act(r, i)` points at row r's activation of step i.
template <int MR, typename Weights, typename Act>
__attribute__((always_inline)) inline void tile(int64_t kc, const Weights& weights, const Act& act, float* c, int64_t ldc,
                                                int64_t valid, bool first) {
  __m256 c0[MR], c1[MR];
  const __m256i m0 = lanes8(valid), m1 = lanes8(valid - 8);
  #pragma GCC unroll 6
  for (int r = 0; r < MR; r++) {
    c0[r] = first ? _mm256_setzero_ps() : _mm256_maskload_ps(c + r * ldc, m0);
    c1[r] = first ? _mm256_setzero_ps() : _mm256_maskload_ps(c + r * ldc + 8, m1);
  }
  for (int64_t i = 0; i < kc; i++) {
    __m256 b0, b1;
    weights(i, b0, b1);
    #pragma GCC unroll 6
    for (int r = 0; r < MR; r++) {
      const __m256 av = _mm256_broadcast_ss(act(r, i));
      c0[r] = _mm256_fmadd_ps(av, b0, c0[r]);
      c1[r] = _mm256_fmadd_ps(av, b1, c1[r]);
    }
  }
  #pragma GCC unroll 6
  for (int r = 0; r < MR; r++) {
    _mm256_maskstore_ps(c + r * ldc, m0, c0[r]);
    _mm256_maskstore_ps(c + r * ldc + 8, m1, c1[r]);
  }
}

// core/dtype.h's f32_to_bf16 back in an f32 (written out here: no shared inline code in an ISA
// file, whose out-of-line copy the linker could hand to a CPU without AVX2).
inline float bf16_rounded(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u = (u & 0x7fffffff) > 0x7f800000 ? (u | 0x400000) & 0xFFFF0000u : (u + 0x7fff + ((u >> 16) & 1)) & 0xFFFF0000u;
  std::memcpy(&f, &u, 4);
  return f;
}

// The last rows' tile, `left` < MR of them, as a tile of that many.
template <int MR, typename Tile>
inline void last_tile(int64_t r, int64_t left, const Tile& t) {
  if constexpr (MR > 1) {
    if (left == MR - 1) return t(r, std::integral_constant<int, MR - 1>{});
    last_tile<MR - 1>(r, left, t);
  }
}

// Rows [r0, r1) in tiles of MR (the last one shorter).
template <int MR, typename Tile>
inline void rows_by_tile(int64_t r0, int64_t r1, const Tile& t) {
  int64_t r = r0;
  for (; r + MR <= r1; r += MR) t(r, std::integral_constant<int, MR>{});
  if (r < r1) last_tile<MR>(r, r1 - r, t);
}

}  // namespace

void gemm_block_f32_avx2(const float* a, const PackedWeight& w, int64_t r0, int64_t r1, int64_t p0, int64_t p1, float* c,
                         int64_t panel_k) {
  const int64_t k = w.k, m = w.m, depth = panel_k > 0 ? panel_k : k;
  for (int64_t k0 = 0; k0 < k; k0 += kDepth) {
    const int64_t kc = std::min(kDepth, k - k0);
    for (int64_t p = p0; p < p1; p++)
      for (int64_t h = 0; h < 2; h++) {
        const int64_t o0 = p * kPanel + h * kHalf;
        if (o0 >= m) break;
        const float* b = w.f32.data() + (p * depth + k0) * kPanel + h * kHalf;
        auto weights = [&](int64_t i, __m256& b0, __m256& b1) {
          b0 = _mm256_loadu_ps(b + i * kPanel);
          b1 = _mm256_loadu_ps(b + i * kPanel + 8);
        };
        rows_by_tile<kRows>(r0, r1, [&](int64_t r, auto mr) {
          const float* ar = a + r * k + k0;
          tile<decltype(mr)::value>(kc, weights, [&](int row, int64_t i) { return ar + row * k + i; }, c + r * m + o0, m,
                                    m - o0, k0 == 0);
        });
      }
  }
}

void gemm_block_bf16w_avx2(const float* a, int64_t lda, const PackedWeight& w, int64_t r0, int64_t r1, int64_t p0,
                           int64_t p1, float* c) {
  const int64_t k2 = (w.k + 1) / 2, m = w.m;
  const __m256i odd = _mm256_set1_epi32((int)0xFFFF0000u);
  for (int64_t q0 = 0; q0 < k2; q0 += kDepth / 2) {
    const int64_t kc2 = std::min(kDepth / 2, k2 - q0);
    for (int64_t p = p0; p < p1; p++)
      for (int64_t h = 0; h < 2; h++) {
        const int64_t o0 = p * kPanel + h * kHalf;
        if (o0 >= m) break;
        // Pair i of the half panel: 16 outputs x (k = 2i, 2i + 1) as 16 dwords, the even k low.
        // The block's even k first, then its odd ones, each a pass of the f32 tile: one pass over
        // both (the pair loaded once, widened twice) kept its two registers live beside the 12
        // accumulators, spilled two of them, and ran 0.71x the f32 tile.
        const uint16_t* b = w.b16.data() + ((p * k2 + q0) * kPanel + h * kHalf) * 2;
        for (int parity = 0; parity < 2; parity++) {
          auto weights = [&](int64_t i, __m256& b0, __m256& b1) {
            const __m256i v0 = _mm256_loadu_si256((const __m256i*)(b + i * kPanel * 2));
            const __m256i v1 = _mm256_loadu_si256((const __m256i*)(b + i * kPanel * 2 + 16));
            b0 = _mm256_castsi256_ps(parity ? _mm256_and_si256(v0, odd) : _mm256_slli_epi32(v0, 16));
            b1 = _mm256_castsi256_ps(parity ? _mm256_and_si256(v1, odd) : _mm256_slli_epi32(v1, 16));
          };
          rows_by_tile<kRows>(r0, r1, [&](int64_t r, auto mr) {
            const float* ar = a + r * lda + 2 * q0 + parity;
            tile<decltype(mr)::value>(kc2, weights, [&](int row, int64_t i) { return ar + row * lda + 2 * i; }, c + r * m + o0,
                                         m, m - o0, q0 == 0 && parity == 0);
          });
        }
      }
  }
}

namespace {

// core/dtype.h's f32_to_bf16 on eight lanes, the bf16 left in each lane's top half: to nearest
// even, a NaN kept quiet.
inline __m256i round8(__m256 x) {
  const __m256i u = _mm256_castps_si256(x), top = _mm256_set1_epi32((int)0xFFFF0000u);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_and_si256(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), odd)), top);
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF)), _mm256_set1_epi32(0x7F800000));
  const __m256i kept = _mm256_and_si256(_mm256_or_si256(u, _mm256_set1_epi32(0x400000)), top);
  return _mm256_blendv_epi8(rounded, kept, nan);
}

}  // namespace

void bf16_rows_avx2(const float* x, int64_t n, int64_t k, int64_t kp, uint16_t* out) {
  for (int64_t t = 0; t < n; t++) {
    const float* xr = x + t * k;
    uint16_t* o = out + t * kp;
    int64_t i = 0;
    for (; i + 8 <= k; i += 8) {
      const __m256i v = _mm256_srli_epi32(round8(_mm256_loadu_ps(xr + i)), 16);
      _mm_storeu_si128((__m128i*)(o + i), _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)));
    }
    for (; i < k; i++) {
      const float f = bf16_rounded(xr[i]);
      uint32_t u;
      std::memcpy(&u, &f, 4);
      o[i] = (uint16_t)(u >> 16);
    }
    for (; i < kp; i++) o[i] = 0;
  }
}

void bf16_rounded_rows_avx2(const float* x, int64_t n, int64_t k, int64_t kp, float* out) {
  for (int64_t t = 0; t < n; t++) {
    const float* xr = x + t * k;
    float* o = out + t * kp;
    int64_t i = 0;
    for (; i + 8 <= k; i += 8) _mm256_storeu_ps(o + i, _mm256_castsi256_ps(round8(_mm256_loadu_ps(xr + i))));
    for (; i < k; i++) o[i] = bf16_rounded(xr[i]);
    for (; i < kp; i++) o[i] = 0;
  }
}

void widen_bf16_rows_avx2(const uint16_t* a, int64_t n, int64_t kp, float* out) {
  const int64_t total = n * kp;
  int64_t i = 0;
  for (; i + 8 <= total; i += 8) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)(a + i)));
    _mm256_storeu_ps(out + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
  }
  for (; i < total; i++) {
    const uint32_t u = (uint32_t)a[i] << 16;
    std::memcpy(out + i, &u, 4);
  }
}

}  // namespace kvad::kernels
