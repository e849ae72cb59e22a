// The AVX-512 tile of the packed q8/q4 layout (quant/packed.h), shared by qmatmul_avx512vnni.cpp
// (AVX-512 VNNI: Cascade Lake, Ice Lake, Zen 4 and later) and qmatmul_avx512.cpp (AVX-512 BW
// without VNNI: Skylake-SP/X, the first AVX-512 Xeons). With VNNI one vpdpbusd multiplies a
// 64-byte load of weight codes (4 inputs x 16 rows, unsigned) by 4 activation codes broadcast to
// every lane (signed) and adds into 16 int32 row sums; 8 of them cover a 32-wide block, after which
// the block's scales are applied once. Without VNNI the same integer sums come from vpmaddubsw
// pairs added in int16 (see block_sums), so both kernels agree bit for bit. Tiles of T tokens x G
// groups of 16 rows keep T*G accumulators in registers: prefill reuses each weight load T times;
// decode (T < 4) takes one group at a time, a single sequential stream per thread, prefetched
// ahead. Internal linkage: the two files are compiled with different instruction sets.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/qmatmul.h"
#include "kernels/x86_helpers.h"

namespace kvad::kernels {

namespace {

inline __m512i bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// acc[t][g] (zeros on entry) = the block's unsigned codes x signed activations, 16 rows of group
// g for token t.
// With VNNI: a vpdpbusd per 4 inputs. Without: a vpmaddubsw pair of 4-bit codes x activations is
// at most 2 x 15 x 128 = 3,840, so a block's eight per lane add in int16 (<= 30,720) and one
// vpmaddwd widens them; q8's byte codes are taken as two nibbles, c = 16 hi + lo, each summed so,
// the high sums widened by 16. The same exact integers either way. Saturating adds (never
// saturating here), since GCC reassociates plain ones into a tree that spills the products.
template <bool Vnni, QKind K, int T, int G>
inline void block_sums(const uint8_t* const (&rec)[G], const int8_t* const (&xb)[T], __m512i (&acc)[T][G]) {
  const __m512i nib = _mm512_set1_epi8(0x0F);
  if constexpr (Vnni) {
#if defined(__AVX512VNNI__)
    if constexpr (K == QKind::Q8) {
      #pragma GCC unroll 8
      for (int s = 0; s < 8; s++)
        #pragma GCC unroll 8
        for (int g = 0; g < G; g++) {
          __m512i wv = _mm512_loadu_si512(rec[g] + s * 64);
          #pragma GCC unroll 8
          for (int t = 0; t < T; t++) acc[t][g] = _mm512_dpbusd_epi32(acc[t][g], wv, bcast4(xb[t] + 4 * s));
        }
    } else {
      #pragma GCC unroll 8
      for (int p = 0; p < 4; p++)
        #pragma GCC unroll 8
        for (int g = 0; g < G; g++) {
          __m512i v = load_once(rec[g] + p * 64);
          __m512i lo = _mm512_and_si512(v, nib), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
          #pragma GCC unroll 8
          for (int t = 0; t < T; t++) {
            acc[t][g] = _mm512_dpbusd_epi32(acc[t][g], lo, bcast4(xb[t] + 8 * p));
            acc[t][g] = _mm512_dpbusd_epi32(acc[t][g], hi, bcast4(xb[t] + 8 * p + 4));
          }
        }
    }
#endif
    static_assert(!Vnni || kAvx512VnniBuild, "the VNNI tile needs -mavx512vnni");
  } else {
    // Per lane pair: q4, low nibbles [0] and high [1] of the same sums; q8, low [0] and high [1]
    // nibbles of each code, kept apart.
    constexpr int kSums = K == QKind::Q8 ? 2 : 1;
    __m512i sum16[T][G][kSums];
    #pragma GCC unroll 8
    for (int t = 0; t < T; t++)
      #pragma GCC unroll 8
      for (int g = 0; g < G; g++)
        #pragma GCC unroll 2
        for (int k = 0; k < kSums; k++) sum16[t][g][k] = _mm512_setzero_si512();
    #pragma GCC unroll 8
    for (int s = 0; s < (K == QKind::Q8 ? 8 : 4); s++)
      #pragma GCC unroll 8
      for (int g = 0; g < G; g++) {
        __m512i v = load_once(rec[g] + s * 64);
        __m512i lo = _mm512_and_si512(v, nib), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
        #pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
          if constexpr (K == QKind::Q8) {
            __m512i xs = bcast4(xb[t] + 4 * s);
            sum16[t][g][0] = _mm512_adds_epi16(sum16[t][g][0], _mm512_maddubs_epi16(lo, xs));
            sum16[t][g][1] = _mm512_adds_epi16(sum16[t][g][1], _mm512_maddubs_epi16(hi, xs));
          } else {
            sum16[t][g][0] = _mm512_adds_epi16(_mm512_adds_epi16(sum16[t][g][0], _mm512_maddubs_epi16(lo, bcast4(xb[t] + 8 * s))),
                                               _mm512_maddubs_epi16(hi, bcast4(xb[t] + 8 * s + 4)));
          }
        }
      }
    #pragma GCC unroll 8
    for (int t = 0; t < T; t++)
      #pragma GCC unroll 8
      for (int g = 0; g < G; g++) {
        acc[t][g] = _mm512_madd_epi16(sum16[t][g][0], _mm512_set1_epi16(1));
        if constexpr (K == QKind::Q8)
          acc[t][g] = _mm512_add_epi32(acc[t][g], _mm512_madd_epi16(sum16[t][g][kSums - 1], _mm512_set1_epi16(16)));
      }
  }
}

// Ahead > 0: prefetch each record's lines that many bytes ahead (the decode path). NextGroups: the
// first tile of tokens over these groups, which reads them from memory, brings each block's
// records of the G groups after them (the next tile's) into L2.
template <bool Vnni, QKind K, int T, int G, int Ahead = 0, bool NextGroups = false>
void tile(const QuantActs& x, const QuantMatrix& w, int64_t g0, int64_t t0, float* y) {
  const int64_t nb = w.blocks(), rows = w.rows(), last_group = w.groups() - 1;
  __m512 out[T][G];
  #pragma GCC unroll 8
  for (int t = 0; t < T; t++)
    #pragma GCC unroll 8
    for (int g = 0; g < G; g++) out[t][g] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; b++) {
    __m512i acc[T][G];
    #pragma GCC unroll 8
    for (int t = 0; t < T; t++)
      #pragma GCC unroll 8
      for (int g = 0; g < G; g++) acc[t][g] = _mm512_setzero_si512();
    const uint8_t* rec[G];
    #pragma GCC unroll 8
    for (int g = 0; g < G; g++) rec[g] = w.record(g0 + g, b);
    if constexpr (Ahead > 0) {
      #pragma GCC unroll 8
      for (int g = 0; g < G; g++) prefetch_record<K>(rec[g], Ahead);
    }
    if constexpr (NextGroups) {
      #pragma GCC unroll 8
      for (int g = 0; g < G; g++) prefetch_record_to_l2<K>(w.record(std::min(g0 + g + G, last_group), b));
    }
    const int8_t* xb[T];
    #pragma GCC unroll 8
    for (int t = 0; t < T; t++) xb[t] = x.codes(t0 + t) + b * 32;
    block_sums<Vnni, K, T, G>(rec, xb, acc);
    // Apply the block's scales: out += d * (dot * sx) + m * (sx * sum(xq)); for q8, m = -128 d.
    #pragma GCC unroll 8
    for (int g = 0; g < G; g++) {
      const int dofs = K == QKind::Q8 ? 512 : 256;
      __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(rec[g] + dofs)));
      if constexpr (K == QKind::Q8) {
        #pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
          size_t i = (size_t)((t0 + t) * x.blocks + b);
          __m512 f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[t][g]), _mm512_set1_ps(x.scale[i]),
                                     _mm512_set1_ps(-128.0f * x.sum[i]));
          out[t][g] = _mm512_fmadd_ps(d, f, out[t][g]);
        }
      } else {
        __m512 m = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(rec[g] + 288)));
        #pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
          size_t i = (size_t)((t0 + t) * x.blocks + b);
          __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(acc[t][g]), _mm512_set1_ps(x.scale[i]));
          out[t][g] = _mm512_fmadd_ps(m, _mm512_set1_ps(x.sum[i]), _mm512_fmadd_ps(d, f, out[t][g]));
        }
      }
    }
  }
  #pragma GCC unroll 8
  for (int g = 0; g < G; g++) {
    int64_t r0 = (g0 + g) * 16;
    int64_t valid = rows - r0 < 16 ? rows - r0 : 16;
    __mmask16 mask = valid >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << valid) - 1);
    #pragma GCC unroll 8
    for (int t = 0; t < T; t++) _mm512_mask_storeu_ps(y + (t0 + t) * rows + r0, mask, out[t][g]);
  }
}

template <bool Vnni, QKind K, int G, int Ahead = 0>
void tokens_for_groups(const QuantActs& x, const QuantMatrix& w, int64_t g, int64_t t0, int64_t t1, float* y) {
  int64_t t = t0;
  // A few tokens (a batch of decoding sequences) read these groups from memory once, on the first
  // tile: without the next groups in flight the hardware prefetcher fell behind (q4 batch 8
  // 298-351 tok/s, with them 417-492: docs/kernels.md, "Dense tiles for a few tokens").
  if constexpr (Ahead == 0)
    if (t + 4 <= t1) {
      tile<Vnni, K, 4, G, 0, true>(x, w, g, t, y);
      t += 4;
    }
  for (; t + 4 <= t1; t += 4) tile<Vnni, K, 4, G, Ahead>(x, w, g, t, y);
  switch (t1 - t) {
    case 3: tile<Vnni, K, 3, G, Ahead>(x, w, g, t, y); break;
    case 2: tile<Vnni, K, 2, G, Ahead>(x, w, g, t, y); break;
    case 1: tile<Vnni, K, 1, G, Ahead>(x, w, g, t, y); break;
  }
}

template <bool Vnni, QKind K>
void groups(const QuantActs& x, const QuantMatrix& w, int64_t g0, int64_t g1, float* y) {
  if (x.n < 4) {
    // Decode: one group at a time, so this thread's share of W is one sequential stream, with a
    // software prefetch 4 KB ahead of it. Four groups in flight (four streams 16 rows apart)
    // read 36 / 53 GB/s of q4 / q8 where the machine streamed ~45-66 (kvad_micro
    // BM_qdecode_stack beside BM_stream_read, interleaved): the hardware prefetcher follows one
    // stream better than four, and q4's short records need the prefetch most (docs/kernels.md).
    for (int64_t g = g0; g < g1; g++) tokens_for_groups<Vnni, K, 1, 4096>(x, w, g, 0, x.n, y);
    return;
  }
  // Prefill: blocks of tokens whose activations stay in L2 (~256 KB) while this thread's share
  // of the weights streams past them (from L3 on the second block onwards).
  int64_t tb = std::max<int64_t>(16, (256 * 1024) / (x.blocks * 32) / 4 * 4);
  for (int64_t t0 = 0; t0 < x.n; t0 += tb) {
    int64_t t1 = std::min(x.n, t0 + tb), g = g0;
    for (; g + 2 <= g1; g += 2) tokens_for_groups<Vnni, K, 2>(x, w, g, t0, t1, y);
    for (; g < g1; g++) tokens_for_groups<Vnni, K, 1>(x, w, g, t0, t1, y);
  }
}

}  // namespace
}  // namespace kvad::kernels
