// AVX-512 prefill for ggml K-quant weights: a group of 16 rows is unpacked once into int8
// codes laid out as qmatmul's records (64 bytes = 4 inputs x 16 rows) with float sub-block scales
// per row, and then a tile of tokens x groups runs over it, one vpdpbusd per 4 inputs x 16 rows x
// 1 token, as kvad's q8 prefill does. The row kernels (kqmatmul_avx512vnni.cpp) unpack every
// super-block again for each 4 tokens and spend two instructions per 64 values and token
// (vpmaddubsw, vpdpwssd) plus a horizontal reduction per super-block; here the unpacking is paid
// once per group and token block and the reduction is gone: a row is a lane.
//
// The integer sums per sub-block are exact and equal to ggml's; the float order is not ggml's
// (a row's sub-blocks are summed as floats, each times d * scale), so results agree with the
// reference to rounding, not bit for bit (KQuant.TilesMatchScalarToRounding).
//
// Shared by kqmatmul_tiles_avx512vnni.cpp and kqmatmul_tiles_avx512.cpp (AVX-512 without VNNI:
// Skylake-SP/X), which differ only in how a sub-block's slots are summed: vpdpbusd, or vpmaddubsw
// pairs added in int16 while exact (kqmatmul_shape.h's kInt16Slots) and one vpmaddwd; the
// same integers, so the two agree bit for bit. Internal linkage: compiled with different flags.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "kernels/kqmatmul.h"
#include "kernels/kqmatmul_shape.h"
#include "kernels/kqmatmul_unpack_avx512.h"
#include "kernels/x86_helpers.h"

namespace kvad::kernels {

namespace {

// Every register of a tokens x groups tile to zero.
template <typename V, int T, int G>
__attribute__((always_inline)) inline void zero(V (&a)[T][G]) {
  #pragma GCC unroll 8
  for (int t = 0; t < T; t++)
    #pragma GCC unroll 8
    for (int g = 0; g < G; g++) a[t][g] = V{};
}

// T tokens from t0 against G unpacked groups (rows 16 * gi[g] ...):
// y = xd * sum over super-blocks of (sum_j (d sc_j) * dot_j  -  corr * pairs . sums),
// where the sums are the activations' 32-value sums (Q4/Q5 mins) or 16-value sums (Q6's -32).
// dot[t][g] = sub-block j's exact int32 sums (codes x activations) of group g's 16 rows, token t.
template <bool Vnni, K KIND, int T, int G>
__attribute__((always_inline)) inline void sub_block_dots(const Unpacked* u, const int8_t* const (&xq)[T], int64_t b, int j,
                                                          __m512i (&dot)[T][G]) {
  using Sh = Shape<KIND>;
  zero(dot);
  if constexpr (Vnni) {
#if defined(__AVX512VNNI__)
    #pragma GCC unroll 8
    for (int s = 0; s < Sh::S; s++) {
      const int slot = j * Sh::S + s;
      #pragma GCC unroll 8
      for (int g = 0; g < G; g++) {
        const __m512i wv = _mm512_load_si512(u[g].codes + b * 4096 + slot * 64);
        #pragma GCC unroll 8
        for (int t = 0; t < T; t++) dot[t][g] = _mm512_dpbusd_epi32(dot[t][g], wv, bcast4(xq[t] + 4 * slot));
      }
    }
#endif
    static_assert(!Vnni || kAvx512VnniBuild, "the VNNI tiles need -mavx512vnni");
  } else {
    constexpr int kRun = kInt16Slots<KIND> < Sh::S ? kInt16Slots<KIND> : Sh::S;
    #pragma GCC unroll 4
    for (int r = 0; r < Sh::S / kRun; r++) {
      __m512i p[T][G];
      zero(p);
      #pragma GCC unroll 8
      for (int s = 0; s < kRun; s++) {
        const int slot = j * Sh::S + r * kRun + s;
        #pragma GCC unroll 8
        for (int g = 0; g < G; g++) {
          const __m512i wv = _mm512_load_si512(u[g].codes + b * 4096 + slot * 64);
          #pragma GCC unroll 8
          for (int t = 0; t < T; t++)  // saturating adds, never saturating: GCC keeps their order
            p[t][g] = _mm512_adds_epi16(p[t][g], _mm512_maddubs_epi16(wv, bcast4(xq[t] + 4 * slot)));
        }
      }
      #pragma GCC unroll 8
      for (int t = 0; t < T; t++)
        #pragma GCC unroll 8
        for (int g = 0; g < G; g++) dot[t][g] = _mm512_add_epi32(dot[t][g], _mm512_madd_epi16(p[t][g], _mm512_set1_epi16(1)));
    }
  }
}

template <bool Vnni, K KIND, int T, int G>
void tile(const KActs& x, const Unpacked* u, const int64_t* gi, int64_t rows, int64_t t0, float* y) {
  using Sh = Shape<KIND>;
  const int64_t nb = x.blocks;
  __m512 out[T][G];
  zero(out);
  for (int64_t b = 0; b < nb; b++) {
    const int8_t* xq[T];
    const int16_t* sums[T];
    #pragma GCC unroll 8
    for (int t = 0; t < T; t++) {
      xq[t] = x.codes(t0 + t, b);
      sums[t] = KIND == K::Q6 ? x.bsums.data() + ((t0 + t) * nb + b) * 16 : x.sums32.data() + ((t0 + t) * nb + b) * 8;
    }
    __m512 f[T][G];
    zero(f);
    for (int j = 0; j < Sh::J; j++) {
      __m512i dot[T][G];
      sub_block_dots<Vnni, KIND, T, G>(u, xq, b, j, dot);
      #pragma GCC unroll 8
      for (int g = 0; g < G; g++) {
        const __m512 sc = _mm512_load_ps(u[g].scale + (b * Sh::J + j) * 16);
        #pragma GCC unroll 8
        for (int t = 0; t < T; t++) f[t][g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[t][g]), sc, f[t][g]);
      }
    }
    __m512i c[T][G];
    zero(c);
    #pragma GCC unroll 8
    for (int p = 0; p < Sh::P; p++)
      #pragma GCC unroll 8
      for (int g = 0; g < G; g++) {
        const __m512i pv = _mm512_load_si512(u[g].pairs + (b * Sh::P + p) * 16);
        #pragma GCC unroll 8
        for (int t = 0; t < T; t++) c[t][g] = add_int16_pair_products<Vnni>(c[t][g], pv, bcast4(sums[t] + 2 * p));
      }
    #pragma GCC unroll 8
    for (int g = 0; g < G; g++) {
      const __m512 corr = _mm512_load_ps(u[g].corr + b * 16);
      #pragma GCC unroll 8
      for (int t = 0; t < T; t++) {
        const __m512 v = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(c[t][g]), corr, f[t][g]);
        out[t][g] = _mm512_fmadd_ps(v, _mm512_set1_ps(x.d[(size_t)((t0 + t) * nb + b)]), out[t][g]);
      }
    }
  }
  #pragma GCC unroll 8
  for (int g = 0; g < G; g++) {
    const int64_t r0 = gi[g] * 16, valid = std::min<int64_t>(16, rows - r0);
    const __mmask16 mask = valid >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << valid) - 1);
    #pragma GCC unroll 8
    for (int t = 0; t < T; t++) _mm512_mask_storeu_ps(y + (t0 + t) * rows + r0, mask, out[t][g]);
  }
}

template <bool Vnni, K KIND, int G>
void tokens(const KActs& x, const Unpacked* u, const int64_t* gi, int64_t rows, int64_t t0, int64_t t1, float* y) {
  int64_t t = t0;
  for (; t + 4 <= t1; t += 4) tile<Vnni, KIND, 4, G>(x, u, gi, rows, t, y);
  switch (t1 - t) {
    case 3: tile<Vnni, KIND, 3, G>(x, u, gi, rows, t, y); break;
    case 2: tile<Vnni, KIND, 2, G>(x, u, gi, rows, t, y); break;
    case 1: tile<Vnni, KIND, 1, G>(x, u, gi, rows, t, y); break;
  }
}

template <bool Vnni, K KIND>
void groups(const KActs& x, const KQuantMatrix& w, int64_t g0, int64_t g1, float* y) {
  const int64_t nb = w.blocks();
  const size_t one = unpacked_bytes<KIND>(nb);
  thread_local std::vector<uint8_t> buf;  // grows to the largest shape once
  if (buf.size() < 2 * one + 64) buf.resize(2 * one + 64);
  uint8_t* base = buf.data() + (64 - (uintptr_t)buf.data() % 64) % 64;  // the tile's aligned loads
  const Unpacked u[2] = {carve<KIND>(base, nb), carve<KIND>(base + one, nb)};
  // Tokens in blocks of ~1 MB of activations (Zen 4's L2), each pair of groups unpacked once per
  // block: 256 KB blocks unpacked a 3072-input matrix again every 84 tokens, 15% slower at 128.
  const int64_t tb = std::max<int64_t>(16, (1024 * 1024) / w.cols() / 4 * 4);
  for (int64_t t0 = 0; t0 < x.n; t0 += tb) {
    const int64_t t1 = std::min(x.n, t0 + tb);
    for (int64_t g = g0; g < g1; g += 2) {
      const int64_t gi[2] = {g, g + 1};
      unpack_group<KIND>(w, g, u[0]);
      if (g + 1 < g1) {
        unpack_group<KIND>(w, g + 1, u[1]);
        tokens<Vnni, KIND, 2>(x, u, gi, w.rows(), t0, t1, y);
      } else {
        tokens<Vnni, KIND, 1>(x, u, gi, w.rows(), t0, t1, y);
      }
    }
  }
}

}  // namespace
}  // namespace kvad::kernels
