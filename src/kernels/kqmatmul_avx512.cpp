// AVX-512 VNNI kernels for ggml K-quant rows (quant/kquant.h) against Q8_K activations. Per
// super-block each row's codes are unpacked once into four 64-byte registers (64 values each, in
// value order) with their sub-block scales as int16 lanes, then reused for a tile of tokens:
// vpmaddubsw (u8 codes x s8 activations -> int16 pairs; at most 63 x 127 x 2, no saturation) and
// vpdpwssd (x int16 scale, summed into int32) apply the scales in integers, 2 instructions per 64
// values; one float FMA per super-block applies d_w * d_x. Q4_K/Q5_K mins go through the
// activations' per-16 sums (one vpmaddwd), Q6_K's -32 offset likewise. Tiles: 1 row x 4 tokens for
// prefill (each unpacked row serves 4 tokens), 2 rows x 1-3 tokens otherwise (two independent
// dependency chains while decoding).
#include <immintrin.h>

#include <cstring>

#include "kernels/kqmatmul.h"
#include "kernels/x86_helpers.h"

namespace kvad::kernels {

namespace {

enum class K { Q4, Q5, Q6 };

// Which sub-block's scale each int16 lane of a 64-value chunk k needs (vpmaddubsw lane i holds
// values 2i and 2i+1 of the chunk).
struct Picks {
  alignas(64) int16_t q45[4][32];  // Q4_K/Q5_K: sub-blocks of 32 -> 2k + i / 16
  alignas(64) int16_t q6[4][32];   // Q6_K: sub-blocks of 16 -> 4k + i / 8
  constexpr Picks() : q45(), q6() {
    #pragma GCC unroll 8
    for (int k = 0; k < 4; k++)
      #pragma GCC unroll 8
      for (int i = 0; i < 32; i++) q45[k][i] = (int16_t)(2 * k + i / 16), q6[k][i] = (int16_t)(4 * k + i / 8);
  }
};
constexpr Picks kPicks;
constexpr const int16_t (&kPickQ45)[4][32] = kPicks.q45;
constexpr const int16_t (&kPickQ6)[4][32] = kPicks.q6;

// One row's super-block, unpacked.
struct Block {
  __m512i q[4];  // codes (unsigned: Q6_K's are q + 32)
  __m512i s[4];  // int16 scale of each maddubs lane
  __m256i m;     // Q4/Q5: int16 min of each activation 16-sum; Q6: int16 scale of each
  float d, dmin;
};

// The 8 (scale, min) 6-bit pairs of Q4_K/Q5_K: bytes 0-7 scales, 8-15 mins.
inline __m128i scales_mins(const uint8_t* p) {
  alignas(16) uint8_t u[16];
  kquant_unpack_scales16(p, u);
  return _mm_load_si128((const __m128i*)u);
}

template <K KIND>
__attribute__((always_inline)) inline void unpack(const uint8_t* blk, Block& b) {
  if constexpr (KIND == K::Q6) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m3 = _mm512_set1_epi8(0x03);
    b.d = f16_at(blk + 208);
    #pragma GCC unroll 8
    for (int h = 0; h < 2; h++) {
      __m512i ql = _mm512_loadu_si512(blk + 64 * h);
      __m256i qh = _mm256_loadu_si256((const __m256i*)(blk + 128 + 32 * h));
      __m512i qa = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
      __m512i qb = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_srli_epi16(qh, 4)), _mm256_srli_epi16(qh, 6), 1);
      b.q[2 * h] = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_slli_epi16(_mm512_and_si512(qa, m3), 4));
      b.q[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                                       _mm512_slli_epi16(_mm512_and_si512(qb, m3), 4));
    }
    // maddubs lane i of chunk k holds values 64k + 2i, +1: sub-block 4k + i / 8.
    __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(blk + 192)));
    b.m = sc;
    #pragma GCC unroll 8
    for (int k = 0; k < 4; k++) b.s[k] = _mm512_permutexvar_epi16(_mm512_load_si512(kPickQ6[k]), _mm512_castsi256_si512(sc));
  } else {
    const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    b.d = f16_at(blk);
    b.dmin = f16_at(blk + 2);
    __m128i sm = scales_mins(blk + 4);
    const uint8_t* qs = blk + (KIND == K::Q5 ? 48 : 16);
    __m256i qh;
    if constexpr (KIND == K::Q5) qh = _mm256_loadu_si256((const __m256i*)(blk + 16));
    #pragma GCC unroll 8
    for (int k = 0; k < 4; k++) {
      __m256i q = _mm256_loadu_si256((const __m256i*)(qs + 32 * k));
      __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
      if constexpr (KIND == K::Q5) {
        lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), one), 4));
        hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * k + 1), one), 4));
      }
      b.q[k] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    }
    // Chunk k: lanes 0-15 sub-block 2k, 16-31 sub-block 2k+1.
    __m512i sc = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(sm));
    #pragma GCC unroll 8
    for (int k = 0; k < 4; k++) b.s[k] = _mm512_permutexvar_epi16(_mm512_load_si512(kPickQ45[k]), sc);
    // Mins per 16-sum: [m0, m0, m1, m1, ...] (bytes 8-15 of sm).
    const __m128i dup = _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
    b.m = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(sm, dup));
  }
}

// Rows r0 .. r0+R, tokens t0 .. t0+T.
template <K KIND, int R, int T>
void tile(const KActs& x, const KQuantMatrix& w, int64_t r0, int64_t t0, float* y) {
  const int64_t nb = w.blocks();
  constexpr size_t bb = KIND == K::Q4 ? 144 : KIND == K::Q5 ? 176 : 210;
  __m512 acc[R][T];
  __m256 accm[R][T];
  #pragma GCC unroll 8
  for (int r = 0; r < R; r++)
    #pragma GCC unroll 8
    for (int t = 0; t < T; t++) acc[r][t] = _mm512_setzero_ps(), accm[r][t] = _mm256_setzero_ps();
  const uint8_t* rowp[R];
  #pragma GCC unroll 8
  for (int r = 0; r < R; r++) rowp[r] = w.row_data(r0 + r);
  for (int64_t b = 0; b < nb; b++) {
    Block blk[R];
    #pragma GCC unroll 8
    for (int r = 0; r < R; r++) unpack<KIND>(rowp[r] + (size_t)b * bb, blk[r]);
    #pragma GCC unroll 8
    for (int t = 0; t < T; t++) {
      const size_t i = (size_t)((t0 + t) * nb + b);
      const int8_t* xq = x.codes(t0 + t, b);
      __m512i xv[4];
      #pragma GCC unroll 8
      for (int k = 0; k < 4; k++) xv[k] = _mm512_loadu_si512(xq + 64 * k);
      __m256i bs = _mm256_loadu_si256((const __m256i*)(x.bsums.data() + i * 16));
      const float xd = x.d[i];
      #pragma GCC unroll 8
      for (int r = 0; r < R; r++) {
        __m512i isum = _mm512_setzero_si512();
        #pragma GCC unroll 8
        for (int k = 0; k < 4; k++) isum = _mm512_dpwssd_epi32(isum, _mm512_maddubs_epi16(blk[r].q[k], xv[k]), blk[r].s[k]);
        __m256i mb = _mm256_madd_epi16(bs, blk[r].m);  // Q4/Q5: m_j * sum_j; Q6: sc_j * sum_j
        if constexpr (KIND == K::Q6) {
          isum = _mm512_sub_epi32(isum, _mm512_zextsi256_si512(_mm256_slli_epi32(mb, 5)));
          acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(xd * blk[r].d), acc[r][t]);
        } else {
          acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(xd * blk[r].d), acc[r][t]);
          accm[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mb), _mm256_set1_ps(xd * blk[r].dmin), accm[r][t]);
        }
      }
    }
  }
  #pragma GCC unroll 8
  for (int r = 0; r < R; r++)
    #pragma GCC unroll 8
    for (int t = 0; t < T; t++) {
      float v = _mm512_reduce_add_ps(acc[r][t]);
      if constexpr (KIND != K::Q6) v -= hsum256(accm[r][t]);
      y[(t0 + t) * w.rows() + r0 + r] = v;
    }
}

template <K KIND>
void rows(const KActs& x, const KQuantMatrix& w, int64_t r0, int64_t r1, float* y) {
  int64_t t = 0;
  for (; t + 4 <= x.n; t += 4)
    for (int64_t r = r0; r < r1; r++) tile<KIND, 1, 4>(x, w, r, t, y);
  if (t == x.n) return;
  // 1-3 tokens left: two rows at a time.
  int64_t r = r0;
  for (; r + 2 <= r1; r += 2) {
    switch (x.n - t) {
      case 3: tile<KIND, 2, 3>(x, w, r, t, y); break;
      case 2: tile<KIND, 2, 2>(x, w, r, t, y); break;
      default: tile<KIND, 2, 1>(x, w, r, t, y); break;
    }
  }
  for (; r < r1; r++)
    for (int64_t u = t; u < x.n; u++) tile<KIND, 1, 1>(x, w, r, u, y);
}

}  // namespace

void krows_q4k_avx512(const KActs& x, const KQuantMatrix& w, int64_t r0, int64_t r1, float* y) {
  rows<K::Q4>(x, w, r0, r1, y);
}
void krows_q5k_avx512(const KActs& x, const KQuantMatrix& w, int64_t r0, int64_t r1, float* y) {
  rows<K::Q5>(x, w, r0, r1, y);
}
void krows_q6k_avx512(const KActs& x, const KQuantMatrix& w, int64_t r0, int64_t r1, float* y) {
  rows<K::Q6>(x, w, r0, r1, y);
}

}  // namespace kvad::kernels
