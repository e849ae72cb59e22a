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

// Ahead > 0: prefetch each record's lines that many bytes ahead (the decode path). Vnni: q8's
// codes are multiplied unsigned, as the AVX-512 tile does, and the block's -128 x sum(x) term
// added with its scale, so each row's float operations are the AVX-512 tile's, in its order.
template <bool Vnni, QKind K, int T, int Ahead = 0>
void tile(const QuantActs& x, const QuantMatrix& w, int64_t g, int64_t t0, float* y) {
  const int64_t nb = w.blocks(), rows = w.rows();
  __m256 out[T][2];
  #pragma GCC unroll 8
  for (int t = 0; t < T; t++) out[t][0] = out[t][1] = _mm256_setzero_ps();
  const __m256i nib = _mm256_set1_epi8(0x0F), flip = _mm256_set1_epi8((char)0x80);
  for (int64_t b = 0; b < nb; b++) {
    __m256i acc[T][2];
    #pragma GCC unroll 8
    for (int t = 0; t < T; t++) acc[t][0] = acc[t][1] = _mm256_setzero_si256();
    const uint8_t* rec = w.record(g, b);
    if constexpr (Ahead > 0) prefetch_record<K>(rec, Ahead);
    const int8_t* xb[T];
    #pragma GCC unroll 8
    for (int t = 0; t < T; t++) xb[t] = x.codes(t0 + t) + b * 32;
    #pragma GCC unroll 8
    for (int h = 0; h < 2; h++) {  // rows 0-7, rows 8-15
      if constexpr (K == QKind::Q8 && Vnni) {
        #pragma GCC unroll 8
        for (int s = 0; s < 8; s++) {
          __m256i wu = _mm256_loadu_si256((const __m256i*)(rec + s * 64 + h * 32));
          #pragma GCC unroll 8
          for (int t = 0; t < T; t++) acc[t][h] = dot4<Vnni>(acc[t][h], wu, bcast4(xb[t] + 4 * s));
        }
      } else if constexpr (K == QKind::Q8) {
        #pragma GCC unroll 8
        for (int s = 0; s < 8; s++) {
          __m256i ws = _mm256_xor_si256(_mm256_loadu_si256((const __m256i*)(rec + s * 64 + h * 32)), flip);
          __m256i wa = _mm256_abs_epi8(ws);
          #pragma GCC unroll 8
          for (int t = 0; t < T; t++) acc[t][h] = dot4<Vnni>(acc[t][h], wa, _mm256_sign_epi8(bcast4(xb[t] + 4 * s), ws));
        }
      } else {
        #pragma GCC unroll 8
        for (int p = 0; p < 4; p++) {
          __m256i v = _mm256_loadu_si256((const __m256i*)(rec + p * 64 + h * 32));
          __m256i lo = _mm256_and_si256(v, nib), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
          #pragma GCC unroll 8
          for (int t = 0; t < T; t++) {
            acc[t][h] = dot4<Vnni>(acc[t][h], lo, bcast4(xb[t] + 8 * p));
            acc[t][h] = dot4<Vnni>(acc[t][h], hi, bcast4(xb[t] + 8 * p + 4));
          }
        }
      }
      __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(rec + (K == QKind::Q8 ? 512 : 256) + h * 16)));
      #pragma GCC unroll 8
      for (int t = 0; t < T; t++) {
        size_t i = (size_t)((t0 + t) * x.blocks + b);
        __m256 f = K == QKind::Q8 && Vnni
                       ? _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[t][h]), _mm256_set1_ps(x.scale[i]), _mm256_set1_ps(-128.0f * x.sum[i]))
                       : _mm256_mul_ps(_mm256_cvtepi32_ps(acc[t][h]), _mm256_set1_ps(x.scale[i]));
        out[t][h] = _mm256_fmadd_ps(d, f, out[t][h]);  // q8 without VNNI: the dot was already signed
        if constexpr (K == QKind::Q4) {
          __m256 m = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(rec + 288 + h * 16)));
          out[t][h] = _mm256_fmadd_ps(m, _mm256_set1_ps(x.sum[i]), out[t][h]);
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
