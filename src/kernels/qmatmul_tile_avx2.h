// The AVX2 tile of the packed q8/q4 layout, shared by qmatmul_avx2.cpp (vpmaddubsw + vpmaddwd,
// for CPUs without AVX-VNNI) and qmatmul_avxvnni.cpp (AVX-VNNI's vpdpbusd: Alder Lake and later
// Intel cores, which have no AVX-512). Without VNNI, vpmaddubsw multiplies unsigned by signed
// bytes into saturating int16 pairs, so q8 codes are first made signed (code - 128, |w| <= 127)
// and the sign moved onto the activation (|w| * sign(x, w)): each pair then stays below
// 2 * 127 * 127 < 32767. q4 codes (0..15) need no such care. Internal linkage: the two files are
// compiled with different instruction sets (x86_helpers.h).
#pragma once
#include <immintrin.h>

#include <cstring>

#include "kernels/qmatmul.h"
#include "kernels/x86_helpers.h"

namespace kvad::kernels {
namespace {

inline __m256i bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// int32 lanes += dot of 4 unsigned weights x 4 signed activations per lane: AVX-VNNI's one
// instruction, or vpmaddubsw's int16 pairs (exact at these code widths) widened by vpmaddwd.
template <bool Vnni>
inline __m256i dot4(__m256i acc, __m256i w_u8, __m256i x_s8) {
#if defined(__AVXVNNI__)
  if constexpr (Vnni) return _mm256_dpbusd_avx_epi32(acc, w_u8, x_s8);
#endif
  static_assert(!Vnni || kAvxVnniBuild, "the AVX-VNNI tile needs -mavxvnni");
  __m256i p16 = _mm256_maddubs_epi16(w_u8, x_s8);
  return _mm256_add_epi32(acc, _mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
}

// An empty asm that reads and writes v: GCC cannot move a sum's terms across it. Without it GCC
// reassociated a block's int32 (or int16) adds into a tree after all the products, keeping every
// product live and spilling most of them.
inline void in_order(__m256i& v) { asm("" : "+x"(v)); }

// One block's integer sums for T tokens: acc[t][h] holds rows 8h..8h+7 of token t. Both halves
// of a record are taken in one pass, so each token's activation broadcasts serve 16 rows (two
// passes issued every broadcast twice; with in_order's fix, a q4 block of two tokens went from 201
// instructions to 139, llvm-mca -mcpu=znver3: docs/kernels.md). Integer sums are exact in any
// order, so every variant's sums are the same numbers.
template <bool Vnni, QKind K, int T>
inline void block_sums(const uint8_t* rec, const int8_t* const (&xb)[T], __m256i (&acc)[T][2]) {
  #pragma GCC unroll 8
  for (int t = 0; t < T; t++) acc[t][0] = acc[t][1] = _mm256_setzero_si256();
  const __m256i nib = _mm256_set1_epi8(0x0F);
  if constexpr (K == QKind::Q8) {
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    #pragma GCC unroll 8
    for (int s = 0; s < 8; s++) {
      __m256i w0 = _mm256_loadu_si256((const __m256i*)(rec + s * 64));
      __m256i w1 = _mm256_loadu_si256((const __m256i*)(rec + s * 64 + 32));
      if constexpr (Vnni) {  // codes multiplied unsigned; the -128 x sum(x) term is added at scaling
        #pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
          __m256i xs = bcast4(xb[t] + 4 * s);
          acc[t][0] = dot4<Vnni>(acc[t][0], w0, xs);
          acc[t][1] = dot4<Vnni>(acc[t][1], w1, xs);
        }
      } else {
        w0 = _mm256_xor_si256(w0, flip), w1 = _mm256_xor_si256(w1, flip);
        const __m256i a0 = _mm256_abs_epi8(w0), a1 = _mm256_abs_epi8(w1);
        #pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
          __m256i xs = bcast4(xb[t] + 4 * s);
          acc[t][0] = dot4<Vnni>(acc[t][0], a0, _mm256_sign_epi8(xs, w0));
          acc[t][1] = dot4<Vnni>(acc[t][1], a1, _mm256_sign_epi8(xs, w1));
          in_order(acc[t][0]), in_order(acc[t][1]);
        }
      }
    }
  } else {
    // Without VNNI a vpmaddubsw pair is at most 2 x 15 x 128 = 3,840, so a block's eight per lane
    // add in int16 without overflow (<= 30,720) and one vpmaddwd widens them: half the multiplies
    // of a vpmaddwd + vpaddd per product. The adds are the saturating ones (never saturating
    // here) because GCC cannot reassociate those: with plain adds it computed all 32 products
    // first and summed them in a tree, spilling most of them.
    __m256i sum16[T][2];
    #pragma GCC unroll 8
    for (int t = 0; t < T; t++) sum16[t][0] = sum16[t][1] = _mm256_setzero_si256();
    #pragma GCC unroll 8
    for (int p = 0; p < 4; p++) {
      __m256i v0 = load_once256(rec + p * 64);
      __m256i v1 = load_once256(rec + p * 64 + 32);
      const __m256i lo0 = _mm256_and_si256(v0, nib), hi0 = _mm256_and_si256(_mm256_srli_epi16(v0, 4), nib);
      const __m256i lo1 = _mm256_and_si256(v1, nib), hi1 = _mm256_and_si256(_mm256_srli_epi16(v1, 4), nib);
      #pragma GCC unroll 8
      for (int t = 0; t < T; t++) {
        __m256i xl = bcast4(xb[t] + 8 * p), xh = bcast4(xb[t] + 8 * p + 4);
        if constexpr (Vnni) {
          acc[t][0] = dot4<Vnni>(dot4<Vnni>(acc[t][0], lo0, xl), hi0, xh);
          acc[t][1] = dot4<Vnni>(dot4<Vnni>(acc[t][1], lo1, xl), hi1, xh);
        } else {
          sum16[t][0] = _mm256_adds_epi16(_mm256_adds_epi16(sum16[t][0], _mm256_maddubs_epi16(lo0, xl)), _mm256_maddubs_epi16(hi0, xh));
          sum16[t][1] = _mm256_adds_epi16(_mm256_adds_epi16(sum16[t][1], _mm256_maddubs_epi16(lo1, xl)), _mm256_maddubs_epi16(hi1, xh));
        }
      }
    }
    if constexpr (!Vnni) {
      const __m256i ones = _mm256_set1_epi16(1);
      #pragma GCC unroll 8
      for (int t = 0; t < T; t++) {
        acc[t][0] = _mm256_madd_epi16(sum16[t][0], ones);
        acc[t][1] = _mm256_madd_epi16(sum16[t][1], ones);
      }
    }
  }
}

// Ahead > 0: prefetch each record's lines that many bytes ahead (the decode path); NextGroup: the
// records of group g + 1 into L2, block by block (a few tokens' first tile). Vnni: q8's
// codes are multiplied unsigned, as the AVX-512 tile does, and the block's -128 x sum(x) term
// added with its scale, so each row's float operations are the AVX-512 tile's, in its order.
template <bool Vnni, QKind K, int T, int Ahead = 0, bool NextGroup = false>
void tile(const QuantActs& x, const QuantMatrix& w, int64_t g, int64_t t0, float* y) {
  constexpr size_t kRecord = QuantMatrix::record_bytes(K);
  constexpr int kScales = K == QKind::Q8 ? 512 : 256, kOffsets = 288;  // f16 d (and q4's m) per row
  const int64_t nb = w.blocks(), rows = w.rows();
  __m256 out[T][2];
  const int8_t* xb[T];
  const float *sx[T], *sum[T];
  #pragma GCC unroll 8
  for (int t = 0; t < T; t++) {
    out[t][0] = out[t][1] = _mm256_setzero_ps();
    xb[t] = x.codes(t0 + t);
    sx[t] = x.scale.data() + (t0 + t) * x.blocks;
    sum[t] = x.sum.data() + (t0 + t) * x.blocks;
  }
  const uint8_t* rec = w.record(g, 0);
  const uint8_t* next = w.record(std::min(g + 1, w.groups() - 1), 0);
  for (int64_t b = 0; b < nb; b++, rec += kRecord, next += kRecord) {
    if constexpr (Ahead > 0) prefetch_record<K>(rec, Ahead);
    if constexpr (NextGroup) prefetch_record_to_l2<K>(next);
    __m256i acc[T][2];
    block_sums<Vnni, K, T>(rec, xb, acc);
    #pragma GCC unroll 8
    for (int t = 0; t < T; t++) xb[t] += 32;
    #pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
      __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(rec + kScales + h * 16)));
      #pragma GCC unroll 8
      for (int t = 0; t < T; t++) {
        __m256 f = K == QKind::Q8 && Vnni
                       ? _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[t][h]), _mm256_set1_ps(sx[t][b]), _mm256_set1_ps(-128.0f * sum[t][b]))
                       : _mm256_mul_ps(_mm256_cvtepi32_ps(acc[t][h]), _mm256_set1_ps(sx[t][b]));
        out[t][h] = _mm256_fmadd_ps(d, f, out[t][h]);  // q8 without VNNI: the dot was already signed
        if constexpr (K == QKind::Q4) {
          __m256 m = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(rec + kOffsets + h * 16)));
          out[t][h] = _mm256_fmadd_ps(m, _mm256_set1_ps(sum[t][b]), out[t][h]);
        }
      }
    }
  }
  int64_t r0 = g * 16;
  #pragma GCC unroll 8
  for (int t = 0; t < T; t++) {
    float tmp[16];
    _mm256_storeu_ps(tmp, out[t][0]);
    _mm256_storeu_ps(tmp + 8, out[t][1]);
    int64_t valid = rows - r0 < 16 ? rows - r0 : 16;
    std::memcpy(y + (t0 + t) * rows + r0, tmp, (size_t)valid * sizeof(float));
  }
}

template <bool Vnni, QKind K, int Ahead>
void groups_ahead(const QuantActs& x, const QuantMatrix& w, int64_t g0, int64_t g1, float* y) {
  for (int64_t g = g0; g < g1; g++) {
    int64_t t = 0;
    // A few tokens read this group from memory once, on the first tile, which brings the next
    // group into L2 meanwhile (`KVAD_ISA=avx2 kvad bench -q q4 --batch 4`: 181-223 -> 243-279 tok/s).
    if constexpr (Ahead == 0)
      if (x.n >= 2) {
        tile<Vnni, K, 2, Ahead, true>(x, w, g, t, y);
        t += 2;
      }
    for (; t + 2 <= x.n; t += 2) tile<Vnni, K, 2, Ahead>(x, w, g, t, y);
    if (t < x.n) tile<Vnni, K, 1, Ahead>(x, w, g, t, y);
  }
}

// Decode (n < 4) prefetches 4 KB ahead, as the AVX-512 path does: one sequential stream per thread.
template <bool Vnni, QKind K>
void groups(const QuantActs& x, const QuantMatrix& w, int64_t g0, int64_t g1, float* y) {
  if (x.n < 4) groups_ahead<Vnni, K, 4096>(x, w, g0, g1, y);
  else groups_ahead<Vnni, K, 0>(x, w, g0, g1, y);
}

}  // namespace
}  // namespace kvad::kernels
