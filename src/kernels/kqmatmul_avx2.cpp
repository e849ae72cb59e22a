// AVX2 kernels for ggml K-quant rows (quant/kquant.h) against Q8_K activations: per 32 values
// vpmaddubsw (u8 codes x s8 activations -> pairs of int16, no saturation at these code widths),
// then vpmaddwd by the sub-block scale (int16) -> int32, as ggml's AVX2 path does; one float FMA
// per super-block. Tiles of up to 4 tokens reuse each unpacked super-block.
#include <immintrin.h>

#include <cstring>

#include "kernels/kqmatmul.h"
#include "kernels/x86_helpers.h"

namespace kvad::kernels {

namespace {

template <bool Q5, int T>
void q45k_tile(const KActs& x, const KQuantMatrix& w, int64_t r, int64_t t0, float* y) {
  const int64_t nb = w.blocks();
  const size_t bb = Q5 ? 176 : 144;
  const uint8_t* row = w.row_data(r);
  const __m256i m4 = _mm256_set1_epi8(0x0F), one8 = _mm256_set1_epi8(1);
  __m256 acc[T];
  #pragma GCC unroll 8
  for (int t = 0; t < T; t++) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t* blk = row + (size_t)b * bb;
    const float d = f16_at(blk), dmin = f16_at(blk + 2);
    alignas(16) uint8_t sm[16];  // scales, then mins
    kquant_unpack_scales16(blk + 4, sm);
    const uint8_t* sc = sm;
    // [m0, m0, m1, m1, ...] as int16 against the activations' 16-value sums.
    __m256i mins = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(
        _mm_load_si128((const __m128i*)sm), _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15)));
    const uint8_t* qs = blk + (Q5 ? 48 : 16);
    __m256i codes[8], scale[8];
    __m256i qh;
    if constexpr (Q5) qh = _mm256_loadu_si256((const __m256i*)(blk + 16));
    #pragma GCC unroll 8
    for (int k = 0; k < 4; k++) {
      __m256i q = _mm256_loadu_si256((const __m256i*)(qs + 32 * k));
      __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
      if constexpr (Q5) {
        lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), one8), 4));
        hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * k + 1), one8), 4));
      }
      codes[2 * k] = lo;
      codes[2 * k + 1] = hi;
    }
    #pragma GCC unroll 8
    for (int j = 0; j < 8; j++) scale[j] = _mm256_set1_epi16(sc[j]);
    #pragma GCC unroll 8
    for (int t = 0; t < T; t++) {
      const int8_t* xq = x.codes(t0 + t, b);
      __m256i isum = _mm256_setzero_si256();
      #pragma GCC unroll 8
      for (int j = 0; j < 8; j++) {
        __m256i p = _mm256_maddubs_epi16(codes[j], _mm256_loadu_si256((const __m256i*)(xq + 32 * j)));
        isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, scale[j]));
      }
      const size_t i = (size_t)((t0 + t) * nb + b);
      __m256i mm = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i*)(x.bsums.data() + i * 16)), mins);
      const float xd = x.d[i];
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(xd * d), acc[t]);
      acc[t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mm), _mm256_set1_ps(xd * dmin), acc[t]);
    }
  }
  #pragma GCC unroll 8
  for (int t = 0; t < T; t++) y[(t0 + t) * w.rows() + r] = hsum256(acc[t]);
}

template <int T>
void q6k_tile(const KActs& x, const KQuantMatrix& w, int64_t r, int64_t t0, float* y) {
  const int64_t nb = w.blocks();
  const uint8_t* row = w.row_data(r);
  const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(0x03);
  __m256 acc[T];
  #pragma GCC unroll 8
  for (int t = 0; t < T; t++) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t* blk = row + (size_t)b * 210;
    const float d = f16_at(blk + 208);
    const int8_t* sc = (const int8_t*)(blk + 192);
    __m256i codes[8], scale[8];
    #pragma GCC unroll 8
    for (int h = 0; h < 2; h++) {
      __m256i ql0 = _mm256_loadu_si256((const __m256i*)(blk + 64 * h));
      __m256i ql1 = _mm256_loadu_si256((const __m256i*)(blk + 64 * h + 32));
      __m256i qh = _mm256_loadu_si256((const __m256i*)(blk + 128 + 32 * h));
      auto hi2 = [&](int s) { return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, s), m3), 4); };
      codes[4 * h + 0] = _mm256_or_si256(_mm256_and_si256(ql0, m4), hi2(0));
      codes[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(ql1, m4), hi2(2));
      codes[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), hi2(4));
      codes[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4), hi2(6));
    }
    // 32 values = sub-blocks 2j (int16 lanes 0-7 of the pair sums) and 2j+1 (lanes 8-15).
    #pragma GCC unroll 8
    for (int j = 0; j < 8; j++)
      scale[j] = _mm256_setr_m128i(_mm_set1_epi16(sc[2 * j]), _mm_set1_epi16(sc[2 * j + 1]));
    __m256i sc_lo = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)sc));
    #pragma GCC unroll 8
    for (int t = 0; t < T; t++) {
      const int8_t* xq = x.codes(t0 + t, b);
      const size_t i = (size_t)((t0 + t) * nb + b);
      __m256i corr = _mm256_madd_epi16(sc_lo, _mm256_loadu_si256((const __m256i*)(x.bsums.data() + i * 16)));
      __m256i isum = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(corr, 5));
      #pragma GCC unroll 8
      for (int j = 0; j < 8; j++) {
        __m256i p = _mm256_maddubs_epi16(codes[j], _mm256_loadu_si256((const __m256i*)(xq + 32 * j)));
        isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, scale[j]));
      }
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(x.d[i] * d), acc[t]);
    }
  }
  #pragma GCC unroll 8
  for (int t = 0; t < T; t++) y[(t0 + t) * w.rows() + r] = hsum256(acc[t]);
}

template <typename Tile>
void rows(const KActs& x, const KQuantMatrix& w, int64_t r0, int64_t r1, float* y) {
  for (int64_t r = r0; r < r1; r++) {
    int64_t t = 0;
    for (; t + 4 <= x.n; t += 4) Tile::template run<4>(x, w, r, t, y);
    switch (x.n - t) {
      case 3: Tile::template run<3>(x, w, r, t, y); break;
      case 2: Tile::template run<2>(x, w, r, t, y); break;
      case 1: Tile::template run<1>(x, w, r, t, y); break;
      default: break;
    }
  }
}

struct Q4K {
  template <int T>
  static void run(const KActs& x, const KQuantMatrix& w, int64_t r, int64_t t0, float* y) {
    q45k_tile<false, T>(x, w, r, t0, y);
  }
};
struct Q5K {
  template <int T>
  static void run(const KActs& x, const KQuantMatrix& w, int64_t r, int64_t t0, float* y) {
    q45k_tile<true, T>(x, w, r, t0, y);
  }
};
struct Q6K {
  template <int T>
  static void run(const KActs& x, const KQuantMatrix& w, int64_t r, int64_t t0, float* y) {
    q6k_tile<T>(x, w, r, t0, y);
  }
};

}  // namespace

void krows_q4k_avx2(const KActs& x, const KQuantMatrix& w, int64_t r0, int64_t r1, float* y) { rows<Q4K>(x, w, r0, r1, y); }
void krows_q5k_avx2(const KActs& x, const KQuantMatrix& w, int64_t r0, int64_t r1, float* y) { rows<Q5K>(x, w, r0, r1, y); }
void krows_q6k_avx2(const KActs& x, const KQuantMatrix& w, int64_t r0, int64_t r1, float* y) { rows<Q6K>(x, w, r0, r1, y); }

}  // namespace kvad::kernels
