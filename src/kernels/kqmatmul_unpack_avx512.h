// A group of 16 rows of a K-quant matrix unpacked once for prefill's tiles: int8 codes laid out
// as qmatmul's records (64 bytes = 4 inputs x 16 rows: also an AMX B tile row) and float
// sub-block scales per row. Shared by the AVX-512 VNNI tiles (kqmatmul_tiles_avx512vnni.cpp) and the
// AMX ones (kqmatmul_amx.cpp); include only from files built with AVX-512 flags. Internal to them
// (an anonymous namespace, as kqmatmul_shape.h).
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "core/dtype.h"
#include "kernels/kqmatmul.h"
#include "kernels/kqmatmul_shape.h"
#include "kernels/x86_helpers.h"

namespace kvad::kernels {
namespace {

// Four activation codes (one slot) in every lane, for vpdpbusd / vpdpwssd against a slot's rows.
inline __m512i bcast4(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// One group of 16 rows, all super-blocks, in the tile's layout. Rows past the matrix's end repeat
// its last row (their outputs are never stored).
struct Unpacked {
  uint8_t* codes;   // [blocks][64 slots][16 rows][4]: unsigned codes (Q6_K's q + 32)
  float* scale;     // [blocks][J][16]: d * sub-block scale
  int32_t* pairs;   // [blocks][P][16]: two int16 per lane: Q4/Q5 (m_2p, m_2p+1), Q6 (sc_2p, sc_2p+1)
  float* corr;      // [blocks][16]: Q4/Q5 dmin, Q6 32 * d
};

template <K KIND>
size_t unpacked_bytes(int64_t blocks) {
  using Sh = Shape<KIND>;
  return (size_t)blocks * (4096 + 64 * (Sh::J + Sh::P + 1));
}

template <K KIND>
Unpacked carve(uint8_t* p, int64_t blocks) {
  using Sh = Shape<KIND>;
  Unpacked u;
  u.codes = p;
  u.scale = (float*)(p + blocks * 4096);
  u.pairs = (int32_t*)(u.scale + blocks * Sh::J * 16);
  u.corr = (float*)(u.pairs + blocks * Sh::P * 16);
  return u;
}

// Dwords [at/4, at/4 + 16) of 16 rows (masked: fewer), turned so that out[k] holds dword k of
// every row: unpacklo/hi of dwords, then of qwords, then a 4 x 4 transpose of 128-bit lanes.
// 64 shuffles and 16 loads: a vpgatherdd per slot made the unpacking twice the tile's time at 16
// tokens (docs/kernels.md, "K-quant prefill").
inline void rows_to_slots(const uint8_t* blk, const int32_t* offs, size_t at, __mmask16 mask, __m512i out[16]) {
  __m512i lo[8], hi[8], u[4][4];
  #pragma GCC unroll 8
  for (int i = 0; i < 8; i++) {
    const __m512i a = _mm512_maskz_loadu_epi32(mask, blk + offs[2 * i] + at);
    const __m512i b = _mm512_maskz_loadu_epi32(mask, blk + offs[2 * i + 1] + at);
    lo[i] = _mm512_unpacklo_epi32(a, b);  // per 128-bit lane L: rows 2i, 2i+1 of dwords 4L, 4L+1
    hi[i] = _mm512_unpackhi_epi32(a, b);  // ... of dwords 4L+2, 4L+3
  }
  #pragma GCC unroll 4
  for (int j = 0; j < 4; j++) {  // u[j][m], lane L: rows 4j .. 4j+3 of dword 4L+m
    u[j][0] = _mm512_unpacklo_epi64(lo[2 * j], lo[2 * j + 1]);
    u[j][1] = _mm512_unpackhi_epi64(lo[2 * j], lo[2 * j + 1]);
    u[j][2] = _mm512_unpacklo_epi64(hi[2 * j], hi[2 * j + 1]);
    u[j][3] = _mm512_unpackhi_epi64(hi[2 * j], hi[2 * j + 1]);
  }
  #pragma GCC unroll 4
  for (int m = 0; m < 4; m++) {  // out[4L+m] lane j = u[j][m] lane L
    const __m512i v0 = _mm512_shuffle_i32x4(u[0][m], u[1][m], 0x44), v1 = _mm512_shuffle_i32x4(u[0][m], u[1][m], 0xEE);
    const __m512i v2 = _mm512_shuffle_i32x4(u[2][m], u[3][m], 0x44), v3 = _mm512_shuffle_i32x4(u[2][m], u[3][m], 0xEE);
    out[m] = _mm512_shuffle_i32x4(v0, v2, 0x88);
    out[4 + m] = _mm512_shuffle_i32x4(v0, v2, 0xDD);
    out[8 + m] = _mm512_shuffle_i32x4(v1, v3, 0x88);
    out[12 + m] = _mm512_shuffle_i32x4(v1, v3, 0xDD);
  }
}

template <K KIND>
void unpack_group(const KQuantMatrix& w, int64_t g, const Unpacked& u) {
  using Sh = Shape<KIND>;
  const int64_t nb = w.blocks(), r0 = g * 16;
  const int n = (int)std::min<int64_t>(16, w.rows() - r0);
  int32_t offs[16];
  for (int i = 0; i < 16; i++) offs[i] = (int32_t)((size_t)std::min(i, n - 1) * w.row_bytes());
  const __m512i m4 = _mm512_set1_epi8(0x0F), m1 = _mm512_set1_epi8(0x01), m3 = _mm512_set1_epi8(0x03);
  const uint8_t* first = w.row_data(r0);
  const size_t block_bytes = dtype_block_bytes(w.type());
  const GroupPrefetch ahead(w, r0);
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t* blk = first + (size_t)b * block_bytes;
    ahead.part(b);
    uint8_t* codes = u.codes + b * 4096;
    auto put = [&](int slot, __m512i v) { _mm512_store_si512(codes + slot * 64, v); };
    if constexpr (KIND == K::Q6) {
      // Value 128h + 32p + 4s + e: ql dword 16h + 8(p % 2) + s, its low (p < 2) or high nibbles,
      // with bits 2p of qh dword 8h + s on top.
      __m512i ql[32], qh[16];
      rows_to_slots(blk, offs, 0, 0xFFFF, ql);
      rows_to_slots(blk, offs, 64, 0xFFFF, ql + 16);
      rows_to_slots(blk, offs, 128, 0xFFFF, qh);
      #pragma GCC unroll 2
      for (int h = 0; h < 2; h++)
        #pragma GCC unroll 8
        for (int s = 0; s < 8; s++) {
          const __m512i a = ql[16 * h + s], c = ql[16 * h + 8 + s], q = qh[8 * h + s];
          auto top = [&](int p) { return _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(q, 2 * p), m3), 4); };
          put(32 * h + s, _mm512_or_si512(_mm512_and_si512(a, m4), top(0)));
          put(32 * h + 8 + s, _mm512_or_si512(_mm512_and_si512(c, m4), top(1)));
          put(32 * h + 16 + s, _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(a, 4), m4), top(2)));
          put(32 * h + 24 + s, _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(c, 4), m4), top(3)));
        }
    } else {
      // Value 64c + 4s + e: qs dword 8c + s's low nibbles, 64c + 32 + 4s + e its high ones;
      // Q5_K's fifth bit is bit 2c (2c + 1) of qh dword s.
      __m512i qs[32], qh[16];
      if constexpr (KIND == K::Q5) {
        __m512i tail[16];
        rows_to_slots(blk, offs, 16, 0xFFFF, qh);  // qh dwords 0-7, then qs dwords 0-7
        rows_to_slots(blk, offs, 80, 0xFFFF, qs + 8);
        rows_to_slots(blk, offs, 144, 0x00FF, tail);  // the block's last 8 dwords
        #pragma GCC unroll 8
        for (int s = 0; s < 8; s++) qs[s] = qh[8 + s], qs[24 + s] = tail[s];
      } else {
        rows_to_slots(blk, offs, 16, 0xFFFF, qs);
        rows_to_slots(blk, offs, 80, 0xFFFF, qs + 16);
      }
      #pragma GCC unroll 8
      for (int s = 0; s < 8; s++)
        #pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
          const __m512i v = qs[8 * c + s];
          __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi32(v, 4), m4);
          if constexpr (KIND == K::Q5) {
            lo = _mm512_or_si512(lo, _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(qh[s], 2 * c), m1), 4));
            hi = _mm512_or_si512(hi, _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(qh[s], 2 * c + 1), m1), 4));
          }
          put(16 * c + s, lo);
          put(16 * c + 8 + s, hi);
        }
    }
    // The scales, a row per lane, from the same dword transpose: Q6_K's 16 signed bytes at 192
    // and f16 d at 208 (the block's last two bytes); Q4_K/Q5_K's f16 (d, dmin) at 0 and the 6-bit pairs, unpacked per row in
    // registers (kquant_scales_mins: scales then mins) and then turned.
    float* scale = u.scale + b * Sh::J * 16;
    int32_t* pairs = u.pairs + b * Sh::P * 16;
    __m512i sc[16], dd[16];
    if constexpr (KIND == K::Q6) {
      rows_to_slots(blk, offs, 192, 0x000F, sc);
      rows_to_slots(blk, offs, 206, 0x0001, dd);  // d in the high half: a block is 210 bytes
      dd[0] = _mm512_srli_epi32(dd[0], 16);
    } else {
      alignas(64) uint8_t sm[16][16];
      static constexpr int32_t kTmp[16] = {0, 16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240};
      #pragma GCC unroll 16
      for (int i = 0; i < 16; i++) _mm_store_si128((__m128i*)sm[i], kquant_scales_mins(blk + offs[i] + 4));
      rows_to_slots(&sm[0][0], kTmp, 0, 0x000F, sc);  // sc[0..1]: scales 0-7, sc[2..3]: mins 0-7
      rows_to_slots(blk, offs, 0, 0x0001, dd);
    }
    const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dd[0]));  // the low f16 of each row's dword
    #pragma GCC unroll 16
    for (int j = 0; j < Sh::J; j++) {
      // Byte j % 4 of dword j / 4, as a number (Q6_K's signed): exact times d (11 x 8 bits).
      const __m512i v = _mm512_slli_epi32(sc[j / 4], 24 - 8 * (j % 4));
      const __m512i x = KIND == K::Q6 ? _mm512_srai_epi32(v, 24) : _mm512_srli_epi32(v, 24);
      _mm512_store_ps(scale + j * 16, _mm512_mul_ps(d, _mm512_cvtepi32_ps(x)));
    }
    #pragma GCC unroll 8
    for (int p = 0; p < Sh::P; p++) {
      // Bytes 2p and 2p + 1 of the pairs' source (Q6_K: the scales, signed; Q4/Q5: the mins) as
      // two int16 in one dword.
      const __m512i v = _mm512_srli_epi32(sc[(KIND == K::Q6 ? 0 : 2) + p / 2], 16 * (p % 2));
      const __m512i lo = _mm512_srai_epi32(_mm512_slli_epi32(v, 24), 24), hi = _mm512_srai_epi32(_mm512_slli_epi32(v, 16), 24);
      const __m512i pair = _mm512_or_si512(_mm512_and_si512(lo, _mm512_set1_epi32(0xFFFF)), _mm512_slli_epi32(hi, 16));
      _mm512_store_si512(pairs + p * 16, pair);
    }
    const __m512 corr = KIND == K::Q6 ? _mm512_mul_ps(_mm512_set1_ps(32.0f), d)
                                      : _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dd[0], 16)));
    _mm512_store_ps(u.corr + b * 16, corr);
  }
}

}  // namespace
}  // namespace kvad::kernels
