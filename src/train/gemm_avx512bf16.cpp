// The AVX512-BF16 training micro-kernel (GemmShape::bf16): A and B rounded to bf16 pairs, one
// vdpbf16ps per (row, half) per pair of k, sums in f32. Only where avx512_bf16_enabled()
// (core/cpu.h): gemm_avx512.cpp, compiled without BF16, adds it to its MicroKernel.
#include <immintrin.h>

#include "train/gemm.h"
#include "train/gemm_tile_avx512.h"

namespace kvad::train {

namespace {

// `cols` columns of a matrix stored k by k (src[k * ld + c]), values 0..kc of each, as bf16 pairs
// in panels of `width` columns, panel q at dst + q * panel_stride, each [ceil(kc/2)][width] (zero
// columns past `cols`, zero past kc): rows k and k+1 are rounded together (vcvtne2ps2bf16, nearest
// even) and interleaved so that each 32-bit lane holds one column's (k, k+1): what vdpbf16ps
// multiplies pairwise. Every panel of a pair of rows before the next pair: each stored row is read
// once, left to right (panel by panel down the rows re-read them from L2: dW's A, 22% of its time).
void to_pairs(const float* src, int64_t ld, int cols, int64_t kc, int width, int64_t panel_stride, uint32_t* dst) {
  static const __m512i interleave = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,
                                                     23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const int panels = (cols + width - 1) / width;
  for (int64_t k = 0; k < kc; k += 2) {
    const float* r0 = src + k * ld;
    uint32_t* d = dst + k / 2 * width;
    for (int q = 0; q < panels; q++, d += panel_stride)
      for (int c = 0; c < width; c += 16) {
        const int at = q * width + c, n = width - c < 16 ? width - c : 16;
        const int valid = cols - at < 0 ? 0 : cols - at < n ? cols - at : n;
        const __mmask16 m = (__mmask16)(n == 16 ? 0xFFFF : (1u << n) - 1);
        const __mmask16 mv = (__mmask16)(valid == 16 ? 0xFFFF : (1u << valid) - 1);
        __m512 lo = _mm512_maskz_loadu_ps(mv, r0 + at);
        __m512 hi = k + 1 < kc ? _mm512_maskz_loadu_ps(mv, r0 + ld + at) : _mm512_setzero_ps();
        __m512i both = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);  // lo's 16 values, then hi's
        _mm512_mask_storeu_epi32(d + c, m, _mm512_permutexvar_epi16(interleave, both));
      }
  }
}

// The same pairs from `rows` rows of a matrix stored row by row (src[r * ld + k]). A row's bf16
// values in order are already its pairs (u32 p = values 2p, 2p+1), so each 16 pairs of 16 rows
// are one conversion per row and a transpose. (Packing such an A in f32 first, one strided
// scalar store per value, was a quarter of a product's time: docs/training.md.)
void rows_to_pairs(const float* src, int64_t ld, int rows, int64_t kc, int width, uint32_t* dst) {
  const int64_t np = (kc + 1) / 2;
  for (int64_t p0 = 0; p0 < np; p0 += 16) {
    const int64_t k = 2 * p0, n = kc - k < 32 ? kc - k : 32, pairs = np - p0 < 16 ? np - p0 : 16;
    const __mmask16 m_lo = (__mmask16)(n >= 16 ? 0xFFFF : (1u << n) - 1);
    const __mmask16 m_hi = (__mmask16)(n >= 32 ? 0xFFFF : n > 16 ? (1u << (n - 16)) - 1 : 0);
    for (int r0 = 0; r0 < width; r0 += 16) {
      __m512 v[16];
      for (int j = 0; j < 16; j++) {
        const float* row = src + (r0 + j) * ld + k;
        v[j] = r0 + j < rows ? (__m512)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(m_hi, row + 16),
                                                           _mm512_maskz_loadu_ps(m_lo, row))
                             : _mm512_setzero_ps();
      }
      transpose16(v);
      const int w = width - r0 < 16 ? width - r0 : 16;
      const __mmask16 m_w = (__mmask16)(w == 16 ? 0xFFFF : (1u << w) - 1);
      for (int64_t t = 0; t < pairs; t++) _mm512_mask_storeu_epi32(dst + (p0 + t) * width + r0, m_w, (__m512i)v[t]);
    }
  }
}

// The bf16 tile: 12 x 32 of C as the f32 one, one vdpbf16ps per (row, half) per pair of k.
void ukernel_bf16(int64_t kp, const uint32_t* A, const uint32_t* B, float* C, int64_t ldc, int mr, int nr, bool add_c,
                  const float* bias) {
  __m512 c[MR][2];
#pragma GCC unroll 12
  for (int i = 0; i < MR; i++) c[i][0] = c[i][1] = _mm512_setzero_ps();
  for (int64_t p = 0; p < kp; p++, A += MR, B += NR) {
    __m512bh b0 = (__m512bh)_mm512_load_si512(B), b1 = (__m512bh)_mm512_load_si512(B + 16);
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++) {
      __m512bh av = (__m512bh)_mm512_set1_epi32((int)A[i]);
      c[i][0] = _mm512_dpbf16_ps(c[i][0], av, b0);
      c[i][1] = _mm512_dpbf16_ps(c[i][1], av, b1);
    }
  }
  store_tile(c, C, ldc, mr, nr, add_c, bias);
}

}  // namespace

void add_bf16_avx512(MicroKernel& uk) {
  uk.to_pairs = to_pairs;
  uk.rows_to_pairs = rows_to_pairs;
  uk.run_bf16 = ukernel_bf16;
}

}  // namespace kvad::train
