// AVX-512 kernels for ggml K-quant rows (quant/kquant.h) against Q8_K activations: decode. Per
// super-block each row's codes are unpacked once into four 64-byte registers (64 values each)
// with their sub-block scales as int16 lanes, then reused for up to 8 tokens: vpmaddubsw (u8 codes
// x s8 activations -> int16 pairs; at most 63 x 127 x 2, no saturation) and vpdpwssd (x int16
// scale, summed into int32) apply the scales in integers, 2 instructions per 64 values; one float
// FMA per super-block applies d_w * d_x. Q4_K/Q5_K mins go through the activations' per-16 sums
// (one vpmaddwd), Q6_K's -32 offset likewise. Rows are taken one after another, so a thread's
// share of W is one stream, prefetched ahead; the unpacking is register-only (shuffles, no
// stores), and the activations are arranged once per call in the order the codes unpack to.
// Up to 8 tokens share one unpacking (the tiles take 8 and more): with 4, a batch of 5-7 decoding
// sequences unpacked every super-block twice, the second time for 1-3 tokens (Qwen3-0.6B Q4_K_M,
// `kvad bench --batch 5,6,7`, old/new alternating: 1.16-1.64x at 5, 0.97-1.25x at 6, 0.79-1.49x at 7).
//
// Shared by kqmatmul_avx512vnni.cpp and kqmatmul_avx512.cpp (without VNNI: Skylake-SP/X), which
// differ in one instruction: vpdpwssd, or vpmaddwd and an add (the same exact int32, so the same
// bits). Internal linkage: the two are compiled with different flags.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/kqmatmul.h"
#include "kernels/kqmatmul_shape.h"
#include "kernels/x86_helpers.h"

namespace kvad::kernels {

namespace {


// Byte-shuffle controls (vpshufb, per 128-bit lane) that spread one scale byte over each int16
// lane of a 64-value register, the other byte zero (0x80): for Q4_K/Q5_K register v lanes 0-1
// hold sub-block a, lanes 2-3 sub-block b (see unpack); Q6_K's int16 scales are picked whole.
struct Controls {
  alignas(64) int8_t q45[4][64];  // from the 8 scale bytes (broadcast: bytes 0-7 and 8-15 alike)
  alignas(64) int8_t q6[2][64];   // from 8 int16 scales: lane j gets scale 4k + j (k = 0, 1)
  constexpr Controls() : q45(), q6() {
    constexpr int sub[4][2] = {{0, 2}, {1, 3}, {4, 6}, {5, 7}};
    #pragma GCC unroll 8
    for (int v = 0; v < 4; v++)
      #pragma GCC unroll 64
      for (int i = 0; i < 64; i++) q45[v][i] = (int8_t)(i % 2 ? 0x80 : sub[v][i / 32]);
    #pragma GCC unroll 2
    for (int k = 0; k < 2; k++)
      #pragma GCC unroll 64
      for (int i = 0; i < 64; i++) q6[k][i] = (int8_t)(2 * (4 * k + i / 16) + i % 2);
  }
};
constexpr Controls kCtl;

// One row's super-block, unpacked into four 64-value registers. Q6_K's are in value order;
// Q4_K/Q5_K's are in the order two 64-byte loads give without crossing lanes: register v holds
// the sub-blocks {0,2}, {1,3}, {4,6}, {5,7} (32 values each), and the activations are loaded to
// match (load_acts).
struct Block {
  __m512i q[4];  // codes (unsigned: Q6_K's are q + 32)
  __m512i s[4];  // int16 scale of each maddubs lane
  __m256i m;     // Q6: the int16 scale of each activation 16-sum
  __m128i mins;  // Q4/Q5: the 8 int16 mins, against the activations' 32-value sums
  __m128 dd;     // lanes 0, 1: d, dmin (Q6: d)
};

// int16 lanes: lo in the low 256 bits, hi in the high (per-half shift counts).
inline __m512i halves(short lo, short hi) {
  return _mm512_inserti64x4(_mm512_set1_epi16(lo), _mm256_set1_epi16(hi), 1);
}

template <K KIND>
__attribute__((always_inline)) inline void unpack(const uint8_t* blk, Block& b) {
  if constexpr (KIND == K::Q6) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    b.dd = _mm_set_ss(f16_at(blk + 208));
    #pragma GCC unroll 8
    for (int h = 0; h < 2; h++) {
      // ql's low nibbles are values 0-63 of the half, its high nibbles 64-127; qh byte l holds
      // the top 2 bits of values l, l+32, l+64, l+96 (bit pairs 0, 2, 4, 6): shifted to bits 4-5.
      const __m512i ql = load_once(blk + 64 * h);
      const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i*)(blk + 128 + 32 * h)));
      const __m512i h01 = _mm512_and_si512(_mm512_sllv_epi16(qh, halves(4, 2)), m30);
      const __m512i h23 = _mm512_and_si512(_mm512_srlv_epi16(qh, halves(0, 2)), m30);
      b.q[2 * h] = _mm512_or_si512(_mm512_and_si512(ql, m4), h01);
      b.q[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4), h23);
    }
    // maddubs lane i of register k holds values 64k + 2i, +1: sub-block 4k + i / 8, so 128-bit
    // lane j wants scale 4k + j.
    const __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(blk + 192)));
    b.m = sc;
    const __m512i lo = _mm512_broadcast_i32x4(_mm256_castsi256_si128(sc)), hi = _mm512_broadcast_i32x4(_mm256_extracti128_si256(sc, 1));
    const __m512i c0 = _mm512_load_si512(kCtl.q6[0]), c1 = _mm512_load_si512(kCtl.q6[1]);
    b.s[0] = _mm512_shuffle_epi8(lo, c0);
    b.s[1] = _mm512_shuffle_epi8(lo, c1);
    b.s[2] = _mm512_shuffle_epi8(hi, c0);
    b.s[3] = _mm512_shuffle_epi8(hi, c1);
  } else {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    int32_t both;
    std::memcpy(&both, blk, 4);
    b.dd = _mm_cvtph_ps(_mm_cvtsi32_si128(both));
    uint64_t scales, mins;
    kquant_scales_mins_u64(blk + 4, scales, mins);
    const __m512i sm = _mm512_set1_epi64((long long)scales);
    const uint8_t* qs = blk + (KIND == K::Q5 ? 48 : 16);
    #pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
      // Bytes 0-31 are chunk 2h's 32 bytes (low nibbles: sub-block 4h, high: 4h+1), bytes 32-63
      // chunk 2h+1's (4h+2, 4h+3).
      const __m512i q = load_once(qs + 64 * h);
      b.q[2 * h] = _mm512_and_si512(q, m4);
      b.q[2 * h + 1] = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
    }
    if constexpr (KIND == K::Q5) {
      // qh byte l: bit 2c is value l of chunk c's low nibbles, bit 2c+1 of its high nibbles.
      const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i*)(blk + 16))), m10 = _mm512_set1_epi8(0x10);
      b.q[0] = _mm512_or_si512(b.q[0], _mm512_and_si512(_mm512_sllv_epi16(qh, halves(4, 2)), m10));  // bits 0, 2
      b.q[1] = _mm512_or_si512(b.q[1], _mm512_and_si512(_mm512_sllv_epi16(qh, halves(3, 1)), m10));  // bits 1, 3
      b.q[2] = _mm512_or_si512(b.q[2], _mm512_and_si512(_mm512_srlv_epi16(qh, halves(0, 2)), m10));  // bits 4, 6
      b.q[3] = _mm512_or_si512(b.q[3], _mm512_and_si512(_mm512_srlv_epi16(qh, halves(1, 3)), m10));  // bits 5, 7
    }
    #pragma GCC unroll 4
    for (int v = 0; v < 4; v++) b.s[v] = _mm512_shuffle_epi8(sm, _mm512_load_si512(kCtl.q45[v]));
    b.mins = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)mins));
  }
}

// One token's 256 activation codes in the order unpack<KIND> leaves the weight codes.
template <K KIND>
__attribute__((always_inline)) inline void load_acts(const int8_t* xq, __m512i xv[4]) {
  if constexpr (KIND == K::Q6) {
    #pragma GCC unroll 4
    for (int k = 0; k < 4; k++) xv[k] = _mm512_loadu_si512(xq + 64 * k);
  } else {
    auto pair = [&](int a, int b) {
      return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i*)(xq + 32 * a))),
                                _mm256_loadu_si256((const __m256i*)(xq + 32 * b)), 1);
    };
    xv[0] = pair(0, 2);
    xv[1] = pair(1, 3);
    xv[2] = pair(4, 6);
    xv[3] = pair(5, 7);
  }
}

// Tokens t0 .. t0+T's codes in the order unpack<KIND> leaves the weight codes, token after token
// (x.k apart), arranged once per call rather than once per row.
template <K KIND>
const int8_t* arrange(const KActs& x, int64_t t0, int64_t T) {
  if constexpr (KIND == K::Q6) {
    return x.codes(t0, 0);
  } else {
    thread_local std::vector<int8_t> buf;  // grows once: no allocation in a steady decode
    if (buf.size() < (size_t)(T * x.k)) buf.resize((size_t)(T * x.k));
    for (int64_t t = 0; t < T; t++)
      for (int64_t b = 0; b < x.blocks; b++) {
        __m512i xv[4];
        load_acts<KIND>(x.codes(t0 + t, b), xv);
        #pragma GCC unroll 4
        for (int k = 0; k < 4; k++) _mm512_storeu_si512(buf.data() + t * x.k + b * 256 + 64 * k, xv[k]);
      }
    return buf.data();
  }
}

// One unpacked super-block against one token's codes (xv, kernel order; bs, s32: its 16- and
// 32-value sums), in the float order of llama.cpp's AVX2 ggml_vec_dot_q*_K_q8_K (both engines
// round alike):
// acc += d*xd * (8 int32 lanes of the scaled sums, each over the same 32 values as ggml's lanes;
// Q6 less 32 * its scaled 16-sums); Q4: accm += -dmin*xd * (4 lanes of mins x 32-value sums);
// Q5: accm lane 0 += -dmin*xd * (their total).
template <bool Vnni, K KIND>
__attribute__((always_inline)) inline void block_dot(const Block& blk, const __m512i xv[4], __m256i bs, const int16_t* s32, float xd, __m256& acc, __m128& accm) {
  __m512i isum = _mm512_setzero_si512();
  #pragma GCC unroll 4
  for (int k = 0; k < 4; k++) isum = add_int16_pair_products<Vnni>(isum, _mm512_maddubs_epi16(blk.q[k], xv[k]), blk.s[k]);
  __m256i sum = _mm256_add_epi32(_mm512_castsi512_si256(isum), _mm512_extracti64x4_epi64(isum, 1));
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

// Rows r0 .. r1 against T tokens from t0, their codes arranged at xk (x86_helpers.h's walk):
// each row's super-blocks unpacked once for the T tokens.
template <bool Vnni, K KIND, int T>
void rows_tile(const KActs& x, const KQuantMatrix& w, int64_t r0, int64_t r1, int64_t t0, const int8_t* xk, float* y) {
  constexpr size_t bb = KIND == K::Q4 ? 144 : KIND == K::Q5 ? 176 : 210;
  const int64_t nb = w.blocks();
  kquant_rows_walk<kType<KIND>, bb, T>(w, r0, r1, t0, y,
                                       [&](const uint8_t* blk, int64_t b, __m256 (&acc)[T], __m128 (&accm)[T])
                                           __attribute__((always_inline)) {
    Block u;
    unpack<KIND>(blk, u);
    #pragma GCC unroll 8
    for (int t = 0; t < T; t++) {
      const size_t at = (size_t)((t0 + t) * nb + b);
      __m512i xv[4];
      #pragma GCC unroll 4
      for (int k = 0; k < 4; k++) xv[k] = _mm512_loadu_si512(xk + t * x.k + b * 256 + 64 * k);
      block_dot<Vnni, KIND>(u, xv, _mm256_loadu_si256((const __m256i*)(x.bsums.data() + at * 16)), x.sums32.data() + at * 8,
                            x.d[at], acc[t], accm[t]);
    }
  });
}

template <bool Vnni, K KIND>
void rows(const KActs& x, const KQuantMatrix& w, int64_t r0, int64_t r1, float* y) {
  for (int64_t t = 0; t < x.n; t += 8) {
    const int64_t T = std::min<int64_t>(8, x.n - t);
    const int8_t* xk = arrange<KIND>(x, t, T);
    switch (T) {
      case 8: rows_tile<Vnni, KIND, 8>(x, w, r0, r1, t, xk, y); break;
      case 7: rows_tile<Vnni, KIND, 7>(x, w, r0, r1, t, xk, y); break;
      case 6: rows_tile<Vnni, KIND, 6>(x, w, r0, r1, t, xk, y); break;
      case 5: rows_tile<Vnni, KIND, 5>(x, w, r0, r1, t, xk, y); break;
      case 4: rows_tile<Vnni, KIND, 4>(x, w, r0, r1, t, xk, y); break;
      case 3: rows_tile<Vnni, KIND, 3>(x, w, r0, r1, t, xk, y); break;
      case 2: rows_tile<Vnni, KIND, 2>(x, w, r0, r1, t, xk, y); break;
      default: rows_tile<Vnni, KIND, 1>(x, w, r0, r1, t, xk, y); break;
    }
  }
}

}  // namespace
}  // namespace kvad::kernels
