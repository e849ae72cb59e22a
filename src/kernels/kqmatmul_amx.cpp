// AMX int8 tiles for K-quant prefill (Q4_K, Q5_K, Q6_K). A group of 16 rows is unpacked once as
// for the AVX-512 tiles (kqmatmul_unpack_avx512.h): a sub-block's slots, 4 inputs x 16 rows in 64
// bytes each, are a TDPBSUD B tile as they lie (8 rows for Q4_K/Q5_K's 32-value sub-blocks, 4
// for Q6_K's 16), and 16 tokens' codes of the sub-block are A. Each sub-block's int32 sums are
// scaled with AVX-512 in the AVX-512 tiles' order, so the two kernels agree bit for bit.
#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "kernels/amx_tiles.h"
#include "kernels/kqmatmul.h"
#include "kernels/kqmatmul_shape.h"
#include "kernels/kqmatmul_unpack_avx512.h"

namespace kvad::kernels {

namespace {

constexpr int kA0 = 0, kB0 = 1, kA1 = 2, kB1 = 3, kC0 = 4, kC1 = 5;

// rows tokens x one sub-block's codes (A), its slots (B), rows tokens x 16 int32 (C).
template <K KIND>
TileConfig config_for(int rows) {
  using Sh = Shape<KIND>;
  TileConfig c;
  for (int a : {kA0, kA1}) c.rows[a] = (uint8_t)rows, c.colsb[a] = Sh::S * 4;
  for (int b : {kB0, kB1}) c.rows[b] = Sh::S, c.colsb[b] = 64;
  for (int o : {kC0, kC1}) c.rows[o] = (uint8_t)rows, c.colsb[o] = 64;
  return c;
}

// Tokens t0..t0+M-1 (M = 0: t0..t0+m-1, a tail) against unpacked group g: y = xd * sum over
// super-blocks of (sum_j (d sc_j) * dot_j - corr * pairs . sums), the arithmetic of
// kqmatmul_tiles_avx512vnni.cpp.
template <class Tiles, K KIND, int M>
void token_tile(const KActs& x, const Unpacked& u, int64_t g, int64_t rows, int64_t t0, float* y, int m = M) {
  const int count = M ? M : m;
  using Sh = Shape<KIND>;
  const int64_t nb = x.blocks, r0 = g * 16, valid = std::min<int64_t>(16, rows - r0);
  const __mmask16 mask = valid >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << valid) - 1);
  alignas(64) int32_t dots[2][16 * 16];
  __m512 out[16];
  #pragma GCC unroll 16
  for (int t = 0; t < count; t++) out[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; b++) {
    __m512 f[16];
    #pragma GCC unroll 16
    for (int t = 0; t < count; t++) f[t] = _mm512_setzero_ps();
    const int8_t* a = x.codes(t0, b);
    const uint8_t* codes = u.codes + b * 4096;
    for (int j = 0; j < Sh::J; j += 2) {  // J is even: two sub-blocks in flight
      Tiles::template load<kA0>(a + j * Sh::S * 4, x.k);
      Tiles::template load<kB0>(codes + j * Sh::S * 64, 64);
      Tiles::template zero<kC0>();
      Tiles::template dpbsud<kC0, kA0, kB0>();
      Tiles::template load<kA1>(a + (j + 1) * Sh::S * 4, x.k);
      Tiles::template load<kB1>(codes + (j + 1) * Sh::S * 64, 64);
      Tiles::template zero<kC1>();
      Tiles::template dpbsud<kC1, kA1, kB1>();
      Tiles::template store<kC0>(dots[0], 64);
      Tiles::template store<kC1>(dots[1], 64);
      #pragma GCC unroll 2
      for (int h = 0; h < 2; h++) {
        const __m512 sc = _mm512_load_ps(u.scale + (b * Sh::J + j + h) * 16);
        #pragma GCC unroll 16
        for (int t = 0; t < count; t++)
          f[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(dots[h] + 16 * t)), sc, f[t]);
      }
    }
    const __m512 corr = _mm512_load_ps(u.corr + b * 16);
    #pragma GCC unroll 16
    for (int t = 0; t < count; t++) {
      const int16_t* sums = KIND == K::Q6 ? x.bsums.data() + ((t0 + t) * nb + b) * 16
                                          : x.sums32.data() + ((t0 + t) * nb + b) * 8;
      __m512i c = _mm512_setzero_si512();
      #pragma GCC unroll 8
      for (int p = 0; p < Sh::P; p++)
        c = _mm512_dpwssd_epi32(c, _mm512_load_si512(u.pairs + (b * Sh::P + p) * 16), bcast4(sums + 2 * p));
      const __m512 v = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(c), corr, f[t]);
      out[t] = _mm512_fmadd_ps(v, _mm512_set1_ps(x.d[(size_t)((t0 + t) * nb + b)]), out[t]);
    }
  }
  #pragma GCC unroll 16
  for (int t = 0; t < count; t++) _mm512_mask_storeu_ps(y + (t0 + t) * rows + r0, mask, out[t]);
}

template <class Tiles, K KIND>
void groups(const KActs& x, const KQuantMatrix& w, int64_t g0, int64_t g1, float* y) {
  const int64_t nb = w.blocks();
  const size_t one = unpacked_bytes<KIND>(nb);
  thread_local std::vector<uint8_t> buf;  // grows to the largest shape once
  if (buf.size() < one + 64) buf.resize(one + 64);
  const Unpacked u = carve<KIND>(buf.data() + (64 - (uintptr_t)buf.data() % 64) % 64, nb);
  // Tokens in blocks of ~1 MB of activations, each group unpacked once per block (as the
  // AVX-512 tiles).
  const int64_t tb = std::max<int64_t>(16, (1024 * 1024) / w.cols() / 16 * 16);
  int configured = 0;
  for (int64_t t0 = 0; t0 < x.n; t0 += tb) {
    const int64_t t1 = std::min(x.n, t0 + tb);
    for (int64_t g = g0; g < g1; g++) {
      unpack_group<KIND>(w, g, u);
      for (int64_t t = t0; t < t1; t += 16) {
        const int m = (int)std::min<int64_t>(16, t1 - t);
        if (m != configured) Tiles::configure(config_for<KIND>(configured = m));
        if (m == 16) token_tile<Tiles, KIND, 16>(x, u, g, w.rows(), t, y);
        else token_tile<Tiles, KIND, 0>(x, u, g, w.rows(), t, y, m);
      }
    }
  }
  Tiles::release();
}

template <class Tiles>
void by_type(const KActs& x, const KQuantMatrix& w, int64_t g0, int64_t g1, float* y) {
  switch (w.type()) {
    case DType::Q4_K: groups<Tiles, K::Q4>(x, w, g0, g1, y); break;
    case DType::Q5_K: groups<Tiles, K::Q5>(x, w, g0, g1, y); break;
    default: groups<Tiles, K::Q6>(x, w, g0, g1, y); break;
  }
}

}  // namespace

void kgroups_tiles_amx(const KActs& x, const KQuantMatrix& w, int64_t g0, int64_t g1, float* y) {
  by_type<HardwareTiles>(x, w, g0, g1, y);
}

void kgroups_tiles_amx_emulated(const KActs& x, const KQuantMatrix& w, int64_t g0, int64_t g1, float* y) {
  by_type<EmulatedTiles>(x, w, g0, g1, y);
}

}  // namespace kvad::kernels
