// AVX2 kernels for ggml K-quant rows (quant/kquant.h) against Q8_K activations: per 32 values
// vpmaddubsw (u8 codes x s8 activations -> pairs of int16, no saturation at these code widths),
// then vpmaddwd by the sub-block scale (int16) -> int32, as ggml's AVX2 path does; one float FMA
// per super-block. Shaped as the AVX-512 kernels are (kqmatmul_avx512vnni.cpp): a super-block
// unpacked once in registers for up to 4 tokens, rows one after another as one prefetched
// stream, eight rows' sums reduced together.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/kqmatmul.h"
#include "kernels/kqmatmul_shape.h"
#include "kernels/x86_helpers.h"

namespace kvad::kernels {

namespace {


// vpshufb controls (per 128-bit lane) that spread byte j of the unpacked scales over 16 int16
// lanes (the other byte zero).
struct Controls {
  alignas(32) int8_t pick[8][32];
  constexpr Controls() : pick() {
    #pragma GCC unroll 8
    for (int j = 0; j < 8; j++)
      #pragma GCC unroll 32
      for (int i = 0; i < 32; i++) pick[j][i] = (int8_t)(i % 2 ? 0x80 : j);
  }
};
constexpr Controls kCtl;

// One row's super-block, unpacked: 8 registers of 32 codes in value order, each with the int16
// scale of its sub-block(s).
struct Block {
  __m256i q[8];
  __m256i s[8];
  __m256i m;     // Q6: the int16 scale of each activation 16-sum
  __m128i mins;  // Q4/Q5: the 8 int16 mins, against the activations' 32-value sums
  __m128 dd;     // lanes 0, 1: d, dmin (Q6: d)
};

template <K KIND>
__attribute__((always_inline)) inline void unpack(const uint8_t* blk, Block& b) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  if constexpr (KIND == K::Q6) {
    const __m256i m3 = _mm256_set1_epi8(0x03);
    b.dd = _mm_set_ss(f16_at(blk + 208));
    #pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
      const __m256i ql0 = load_once256(blk + 64 * h);
      const __m256i ql1 = load_once256(blk + 64 * h + 32);
      const __m256i qh = _mm256_loadu_si256((const __m256i*)(blk + 128 + 32 * h));
      auto hi2 = [&](int s) { return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, s), m3), 4); };
      b.q[4 * h + 0] = _mm256_or_si256(_mm256_and_si256(ql0, m4), hi2(0));
      b.q[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(ql1, m4), hi2(2));
      b.q[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), hi2(4));
      b.q[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4), hi2(6));
    }
    // 32 values = sub-blocks 2j (int16 lanes 0-7 of the pair sums) and 2j+1 (lanes 8-15): the
    // int16 scales 2j, 2j+1 picked per 128-bit lane.
    const __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(blk + 192)));
    b.m = sc;
    const __m256i lo = _mm256_permute2x128_si256(sc, sc, 0x00), hi = _mm256_permute2x128_si256(sc, sc, 0x11);
    #pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
      // Lane 0 wants word (2j) % 8, lane 1 word (2j+1) % 8, of sc[0..7] (j < 4) or sc[8..15].
      const int w0 = (2 * j) % 8, w1 = (2 * j + 1) % 8;
      const __m256i ctl = _mm256_setr_epi8(2 * w0, 2 * w0 + 1, 2 * w0, 2 * w0 + 1, 2 * w0, 2 * w0 + 1, 2 * w0, 2 * w0 + 1,
                                           2 * w0, 2 * w0 + 1, 2 * w0, 2 * w0 + 1, 2 * w0, 2 * w0 + 1, 2 * w0, 2 * w0 + 1,
                                           2 * w1, 2 * w1 + 1, 2 * w1, 2 * w1 + 1, 2 * w1, 2 * w1 + 1, 2 * w1, 2 * w1 + 1,
                                           2 * w1, 2 * w1 + 1, 2 * w1, 2 * w1 + 1, 2 * w1, 2 * w1 + 1, 2 * w1, 2 * w1 + 1);
      b.s[j] = _mm256_shuffle_epi8(j < 4 ? lo : hi, ctl);
    }
  } else {
    int32_t both;
    std::memcpy(&both, blk, 4);
    b.dd = _mm_cvtph_ps(_mm_cvtsi32_si128(both));
    const __m256i sm = _mm256_broadcastsi128_si256(kquant_scales_mins(blk + 4));
    const uint8_t* qs = blk + (KIND == K::Q5 ? 48 : 16);
    __m256i qh;
    if constexpr (KIND == K::Q5) qh = _mm256_loadu_si256((const __m256i*)(blk + 16));
    const __m256i one = _mm256_set1_epi8(1);
    #pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
      const __m256i q = load_once256(qs + 32 * k);
      __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
      if constexpr (KIND == K::Q5) {
        lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), one), 4));
        hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * k + 1), one), 4));
      }
      b.q[2 * k] = lo;
      b.q[2 * k + 1] = hi;
    }
    #pragma GCC unroll 8
    for (int j = 0; j < 8; j++) b.s[j] = _mm256_shuffle_epi8(sm, _mm256_load_si256((const __m256i*)kCtl.pick[j]));
    b.mins = _mm_cvtepu8_epi16(_mm_srli_si128(_mm256_castsi256_si128(sm), 8));
  }
}

// One unpacked super-block against one token's 256 codes (bs: their 16-value sums), in the float
// order of llama.cpp's AVX2 kernels (see the AVX-512 file's block_dot).
template <K KIND>
__attribute__((always_inline)) inline void block_dot(const Block& blk, const int8_t* xq, __m256i bs, const int16_t* s32, float xd, __m256& acc, __m128& accm) {
  __m256i sum = _mm256_setzero_si256();
  #pragma GCC unroll 8
  for (int j = 0; j < 8; j++) {
    const __m256i p = _mm256_maddubs_epi16(blk.q[j], _mm256_loadu_si256((const __m256i*)(xq + 32 * j)));
    sum = _mm256_add_epi32(sum, _mm256_madd_epi16(p, blk.s[j]));
  }
  if constexpr (KIND == K::Q6) sum = _mm256_sub_epi32(sum, _mm256_slli_epi32(_mm256_madd_epi16(bs, blk.m), 5));
  const __m128 dx = _mm_mul_ps(blk.dd, _mm_set1_ps(xd));  // d*xd, dmin*xd: ggml's products
  acc = _mm256_fmadd_ps(_mm256_broadcastss_ps(dx), _mm256_cvtepi32_ps(sum), acc);
  if constexpr (KIND != K::Q6) {
    // ggml's -dmin*xd * prod + accm, as one fused negated multiply-add (the same rounding).
    const __m128i prod = _mm_madd_epi16(blk.mins, _mm_loadu_si128((const __m128i*)s32));
    const __m128 dmin = _mm_permute_ps(dx, 0x55);  // lane 1 everywhere
    if constexpr (KIND == K::Q4) {
      accm = _mm_fnmadd_ps(dmin, _mm_cvtepi32_ps(prod), accm);
    } else {
      const __m128i t = _mm_hadd_epi32(_mm_hadd_epi32(prod, _mm_setzero_si128()), _mm_setzero_si128());
      accm = _mm_fnmadd_ss(dmin, _mm_cvtepi32_ps(t), accm);
    }
  }
}

// Rows r0 .. r1 against T tokens from t0 (x86_helpers.h's walk), each super-block unpacked once
// for the T tokens.
template <K KIND, int T>
void rows_tile(const KActs& x, const KQuantMatrix& w, int64_t r0, int64_t r1, int64_t t0, float* y) {
  constexpr size_t bb = KIND == K::Q4 ? 144 : KIND == K::Q5 ? 176 : 210;
  const int64_t nb = w.blocks();
  kquant_rows_walk<kType<KIND>, bb, T>(w, r0, r1, t0, y,
                                       [&](const uint8_t* blk, int64_t b, __m256 (&acc)[T], __m128 (&accm)[T])
                                           __attribute__((always_inline)) {
    Block u;
    unpack<KIND>(blk, u);
    #pragma GCC unroll 4
    for (int t = 0; t < T; t++) {
      const size_t at = (size_t)((t0 + t) * nb + b);
      block_dot<KIND>(u, x.codes(t0 + t, b), _mm256_loadu_si256((const __m256i*)(x.bsums.data() + at * 16)),
                      x.sums32.data() + at * 8, x.d[at], acc[t], accm[t]);
    }
  });
}

template <K KIND>
void rows(const KActs& x, const KQuantMatrix& w, int64_t r0, int64_t r1, float* y) {
  for (int64_t t = 0; t < x.n; t += 4) {
    switch (std::min<int64_t>(4, x.n - t)) {
      case 4: rows_tile<KIND, 4>(x, w, r0, r1, t, y); break;
      case 3: rows_tile<KIND, 3>(x, w, r0, r1, t, y); break;
      case 2: rows_tile<KIND, 2>(x, w, r0, r1, t, y); break;
      default: rows_tile<KIND, 1>(x, w, r0, r1, t, y); break;
    }
  }
}

}  // namespace

void krows_q4k_avx2(const KActs& x, const KQuantMatrix& w, int64_t r0, int64_t r1, float* y) { rows<K::Q4>(x, w, r0, r1, y); }
void krows_q5k_avx2(const KActs& x, const KQuantMatrix& w, int64_t r0, int64_t r1, float* y) { rows<K::Q5>(x, w, r0, r1, y); }
void krows_q6k_avx2(const KActs& x, const KQuantMatrix& w, int64_t r0, int64_t r1, float* y) { rows<K::Q6>(x, w, r0, r1, y); }

}  // namespace kvad::kernels
