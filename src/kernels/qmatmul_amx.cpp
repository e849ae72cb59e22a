// AMX int8 tiles for prefill over the packed q8/q4 layout (quant/packed.h). A record of one block
// of 16 rows is already a B tile: 8 rows of 64 bytes, each row 4 inputs x 16 weight rows, the
// layout TDPBSUD reads (q4's nibble rows are split into two byte rows first). A tile of 16 tokens
// x one block's 32 int8 codes is A; one TDPBSUD gives the 16 x 16 block dot products, exact in
// int32, which are then scaled with AVX-512 exactly as qmatmul_tile_avx512.h does (so the two agree
// bit for bit). The block scales differ per block, so each block is its own product (K = 32) and
// its own scaling; two blocks are in flight at a time.
#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "kernels/amx_tiles.h"
#include "kernels/qmatmul.h"

namespace kvad::kernels {

namespace {

constexpr int kA0 = 0, kB0 = 1, kA1 = 2, kB1 = 3, kC0 = 4, kC1 = 5;

// rows tokens x 32 codes (A), 8 x 64 weight bytes (B), rows tokens x 16 int32 (C).
TileConfig config_for(int rows) {
  TileConfig c;
  for (int a : {kA0, kA1}) c.rows[a] = (uint8_t)rows, c.colsb[a] = 32;
  for (int b : {kB0, kB1}) c.rows[b] = 8, c.colsb[b] = 64;
  for (int o : {kC0, kC1}) c.rows[o] = (uint8_t)rows, c.colsb[o] = 64;
  return c;
}

// One group's q4 codes as B tiles, a block every 512 bytes: nibble row p of a record holds inputs
// 8p..8p+3 in its low halves and 8p+4..8p+7 in its high halves, i.e. B rows 2p and 2p+1.
void unpack_q4_group(const QuantMatrix& w, int64_t g, uint8_t* out) {
  const __m512i nib = _mm512_set1_epi8(0x0F);
  for (int64_t b = 0; b < w.blocks(); b++) {
    const uint8_t* rec = w.record(g, b);
    for (int p = 0; p < 4; p++) {
      __m512i v = _mm512_loadu_si512(rec + p * 64);
      _mm512_storeu_si512(out + b * 512 + (2 * p) * 64, _mm512_and_si512(v, nib));
      _mm512_storeu_si512(out + b * 512 + (2 * p + 1) * 64, _mm512_and_si512(_mm512_srli_epi16(v, 4), nib));
    }
  }
}

// out[i] += the block's scaled dot products of token t0 + i, the arithmetic of qmatmul_tile_avx512.h.
// M tokens, or (M = 0, a tail) m of them.
template <QKind K, int M>
inline void scale_block(const int32_t* dots, const QuantActs& x, const uint8_t* rec, int64_t t0, int64_t b, __m512* out,
                        int m) {
  const int count = M ? M : m;
  const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(rec + (K == QKind::Q8 ? 512 : 256))));
  if constexpr (K == QKind::Q8) {
    #pragma GCC unroll 16
    for (int i = 0; i < count; i++) {
      const size_t s = (size_t)((t0 + i) * x.blocks + b);
      __m512 f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(dots + 16 * i)), _mm512_set1_ps(x.scale[s]),
                                 _mm512_set1_ps(-128.0f * x.sum[s]));
      out[i] = _mm512_fmadd_ps(d, f, out[i]);
    }
  } else {
    const __m512 m = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(rec + 288)));
    #pragma GCC unroll 16
    for (int i = 0; i < count; i++) {
      const size_t s = (size_t)((t0 + i) * x.blocks + b);
      __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_load_si512(dots + 16 * i)), _mm512_set1_ps(x.scale[s]));
      out[i] = _mm512_fmadd_ps(m, _mm512_set1_ps(x.sum[s]), _mm512_fmadd_ps(d, f, out[i]));
    }
  }
}

// Tokens t0..t0+M-1 (M = 0: t0..t0+m-1, a tail) against group g, whose B tiles start at btiles
// (a block every bstride bytes).
template <class Tiles, QKind K, int M>
void token_tile(const QuantActs& x, const QuantMatrix& w, int64_t g, const uint8_t* btiles, int64_t bstride, int64_t t0,
                float* y, int m = M) {
  const int count = M ? M : m;
  const int64_t nb = w.blocks(), astride = x.blocks * 32;
  const int8_t* a = x.codes(t0);
  alignas(64) int32_t dots0[16 * 16], dots1[16 * 16];
  __m512 out[16];
  #pragma GCC unroll 16
  for (int i = 0; i < count; i++) out[i] = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    Tiles::template load<kA0>(a + b * 32, astride);
    Tiles::template load<kB0>(btiles + b * bstride, 64);
    Tiles::template zero<kC0>();
    Tiles::template dpbsud<kC0, kA0, kB0>();
    Tiles::template load<kA1>(a + (b + 1) * 32, astride);
    Tiles::template load<kB1>(btiles + (b + 1) * bstride, 64);
    Tiles::template zero<kC1>();
    Tiles::template dpbsud<kC1, kA1, kB1>();
    Tiles::template store<kC0>(dots0, 64);
    Tiles::template store<kC1>(dots1, 64);
    scale_block<K, M>(dots0, x, w.record(g, b), t0, b, out, m);
    scale_block<K, M>(dots1, x, w.record(g, b + 1), t0, b + 1, out, m);
  }
  if (b < nb) {
    Tiles::template load<kA0>(a + b * 32, astride);
    Tiles::template load<kB0>(btiles + b * bstride, 64);
    Tiles::template zero<kC0>();
    Tiles::template dpbsud<kC0, kA0, kB0>();
    Tiles::template store<kC0>(dots0, 64);
    scale_block<K, M>(dots0, x, w.record(g, b), t0, b, out, m);
  }
  const int64_t r0 = g * 16, valid = std::min<int64_t>(16, w.rows() - r0);
  const __mmask16 mask = valid >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << valid) - 1);
  #pragma GCC unroll 16
  for (int i = 0; i < count; i++) _mm512_mask_storeu_ps(y + (t0 + i) * w.rows() + r0, mask, out[i]);
}

template <class Tiles, QKind K>
void groups(const QuantActs& x, const QuantMatrix& w, int64_t g0, int64_t g1, float* y) {
  static thread_local std::vector<uint8_t> q4_tiles;  // grows to the largest matrix once
  if (K == QKind::Q4 && q4_tiles.size() < (size_t)w.blocks() * 512) q4_tiles.resize((size_t)w.blocks() * 512);
  // Blocks of tokens whose activations stay in L2 while this thread's weights stream past them.
  const int64_t tb = std::max<int64_t>(16, (256 * 1024) / (x.blocks * 32) / 16 * 16);
  int configured = 0;
  for (int64_t t0 = 0; t0 < x.n; t0 += tb) {
    const int64_t t1 = std::min(x.n, t0 + tb);
    for (int64_t g = g0; g < g1; g++) {
      const uint8_t* bt = w.record(g, 0);
      int64_t bs = (int64_t)QuantMatrix::record_bytes(K);
      if constexpr (K == QKind::Q4) {
        unpack_q4_group(w, g, q4_tiles.data());
        bt = q4_tiles.data(), bs = 512;
      }
      for (int64_t t = t0; t < t1; t += 16) {
        const int m = (int)std::min<int64_t>(16, t1 - t);
        if (m != configured) Tiles::configure(config_for(configured = m));
        if (m == 16) token_tile<Tiles, K, 16>(x, w, g, bt, bs, t, y);
        else token_tile<Tiles, K, 0>(x, w, g, bt, bs, t, y, m);
      }
    }
  }
  Tiles::release();
}

}  // namespace

void qgroups_q8_amx(const QuantActs& x, const QuantMatrix& w, int64_t g0, int64_t g1, float* y) {
  groups<HardwareTiles, QKind::Q8>(x, w, g0, g1, y);
}
void qgroups_q4_amx(const QuantActs& x, const QuantMatrix& w, int64_t g0, int64_t g1, float* y) {
  groups<HardwareTiles, QKind::Q4>(x, w, g0, g1, y);
}
void qgroups_q8_amx_emulated(const QuantActs& x, const QuantMatrix& w, int64_t g0, int64_t g1, float* y) {
  groups<EmulatedTiles, QKind::Q8>(x, w, g0, g1, y);
}
void qgroups_q4_amx_emulated(const QuantActs& x, const QuantMatrix& w, int64_t g0, int64_t g1, float* y) {
  groups<EmulatedTiles, QKind::Q4>(x, w, g0, g1, y);
}

}  // namespace kvad::kernels
