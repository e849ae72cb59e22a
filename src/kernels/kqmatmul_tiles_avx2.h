// AVX2 prefill for ggml K-quant weights, the AVX-512 tiles' plan (kqmatmul_tiles_avx512vnni.cpp) without
// VNNI: a group of 16 rows is unpacked once into unsigned codes in qmatmul's record layout (64
// bytes = 4 inputs x 16 rows; 32 bytes = 8 rows, one register), and a 2-token tile runs over it.
// vpmaddubsw gives each row's 4-input sums as two int16 (no saturation: |x| <= 128, so a pair is at
// most 2 * 63 * 128), several slots are added as int16 while that stays exact, and one vpmaddwd by
// the row's sub-block scale turns them into int32. The row kernels (kqmatmul_avx2.cpp) spend a
// vpmaddubsw and a vpmaddwd per 32 values and token, unpack every super-block again for each 4
// tokens and reduce each row horizontally; here a Q4_K sub-block costs a vpmaddubsw and a vpaddw
// per slot and one vpmaddwd, and a row is a lane.
//
// The integer sums are ggml's, exactly; a super-block's int32 total is converted to float once, so
// the float order is the tile's own and results agree with the reference to rounding
// (KQuant.TilesMatchScalarToRounding).
//
// Shared by kqmatmul_tiles_avx2.cpp and kqmatmul_tiles_avxvnni.cpp (AVX-VNNI: Alder Lake and later
// Intel cores), which differ only in how a sub-block's slots are summed. Internal linkage: the two
// are compiled with different instruction sets (x86_helpers.h).
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "kernels/kqmatmul.h"
#include "kernels/kqmatmul_shape.h"
#include "kernels/x86_helpers.h"

namespace kvad::kernels {

namespace {

// One group of 16 rows, all super-blocks, in the tile's layout. Rows past the matrix's end repeat
// its last row (their outputs are never stored).
struct Unpacked {
  uint8_t* codes;  // [blocks][64 slots][16 rows][4]: unsigned codes (Q6_K's q + 32)
  int32_t* scale;  // [blocks][J][16]: the sub-block scale twice, as two int16 (vpmaddwd's operand)
  int32_t* pairs;  // [blocks][P][16]: two int16: Q4/Q5 (m_2p, m_2p+1), Q6 (sc_2p, sc_2p+1)
  float* d;        // [blocks][16]
  float* dmin;     // [blocks][16]: Q4/Q5 only
};

template <K KIND>
size_t unpacked_bytes(int64_t blocks) {
  using Sh = Shape<KIND>;
  return (size_t)blocks * (4096 + 64 * (Sh::J + Sh::P + 2));
}

template <K KIND>
Unpacked carve(uint8_t* p, int64_t blocks) {
  using Sh = Shape<KIND>;
  Unpacked u;
  u.codes = p;
  u.scale = (int32_t*)(p + blocks * 4096);
  u.pairs = u.scale + blocks * Sh::J * 16;
  u.d = (float*)(u.pairs + blocks * Sh::P * 16);
  u.dmin = u.d + blocks * 16;
  return u;
}

// Dwords [at/4, at/4 + 8) of 8 rows, turned so that out[k] holds dword k of every row (an 8 x 8
// transpose: unpacklo/hi of dwords, then of qwords, then the 128-bit halves).
inline void rows_to_slots(const uint8_t* blk, const int32_t* offs, size_t at, __m256i out[8]) {
  __m256i r[8], t[8], u[8];
  #pragma GCC unroll 8
  for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_si256((const __m256i*)(blk + offs[i] + at));
  #pragma GCC unroll 4
  for (int i = 0; i < 4; i++) {
    t[2 * i] = _mm256_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  #pragma GCC unroll 2
  for (int i = 0; i < 2; i++) {  // u[4i + m], half L: rows 4i .. 4i+3 of dword 4L + m
    u[4 * i + 0] = _mm256_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm256_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm256_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm256_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  #pragma GCC unroll 4
  for (int m = 0; m < 4; m++) {
    out[m] = _mm256_permute2x128_si256(u[m], u[4 + m], 0x20);
    out[4 + m] = _mm256_permute2x128_si256(u[m], u[4 + m], 0x31);
  }
}

// Byte `k` of each dword, as an unsigned (or sign-extended) number.
template <bool Signed>
inline __m256i byte_of(__m256i v, int k) {
  const __m256i top = _mm256_slli_epi32(v, 24 - 8 * k);
  return Signed ? _mm256_srai_epi32(top, 24) : _mm256_srli_epi32(top, 24);
}

// Two int16 in one dword: lo in the low half, hi in the high one.
inline __m256i int16_pair(__m256i lo, __m256i hi) {
  return _mm256_or_si256(_mm256_and_si256(lo, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(hi, 16));
}

// The f16 in the low half of each dword, as floats.
inline __m256 low_halves_as_floats(__m256i v) {
  const __m256i lo = _mm256_and_si256(v, _mm256_set1_epi32(0xFFFF));
  // packus keeps each 128-bit half's four values twice; the permute puts halves 0 and 1 first.
  return _mm256_cvtph_ps(_mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(lo, lo), 0xD8)));
}

// Eight rows' sub-block scales (bytes of sc, 4 a dword; Q6_K's signed) as vpmaddwd operands, and
// the correction's int16 pairs from bytes 2p, 2p + 1 of `pair_bytes` (Q6_K: the scales again,
// Q4_K/Q5_K: the mins).
template <K KIND>
inline void store_scales(const __m256i* sc, const __m256i* pair_bytes, int32_t* scale, int32_t* pairs) {
  constexpr bool kSigned = KIND == K::Q6;
  #pragma GCC unroll 16
  for (int j = 0; j < Shape<KIND>::J; j++) {
    const __m256i v = byte_of<kSigned>(sc[j / 4], j % 4);
    _mm256_store_si256((__m256i*)(scale + j * 16), int16_pair(v, v));
  }
  #pragma GCC unroll 8
  for (int p = 0; p < Shape<KIND>::P; p++) {
    const __m256i src = pair_bytes[p / 2];
    _mm256_store_si256((__m256i*)(pairs + p * 16),
                       int16_pair(byte_of<kSigned>(src, 2 * (p % 2)), byte_of<kSigned>(src, 2 * (p % 2) + 1)));
  }
}

template <K KIND>
void unpack_group(const KQuantMatrix& w, int64_t g, const Unpacked& u) {
  using Sh = Shape<KIND>;
  const int64_t nb = w.blocks(), r0 = g * 16;
  const int n = (int)std::min<int64_t>(16, w.rows() - r0);
  alignas(32) int32_t offs[16];
  for (int i = 0; i < 16; i++) offs[i] = (int32_t)((size_t)std::min(i, n - 1) * w.row_bytes());
  const __m256i m4 = _mm256_set1_epi8(0x0F), m1 = _mm256_set1_epi8(0x01), m3 = _mm256_set1_epi8(0x03);
  const __m256i m6 = _mm256_set1_epi8(0x3F), top2 = _mm256_set1_epi8(0x30);
  const uint8_t* first = w.row_data(r0);
  const size_t block_bytes = dtype_block_bytes(w.type());
  const GroupPrefetch ahead(w, r0);
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t* blk = first + (size_t)b * block_bytes;
    ahead.part(b);
    uint8_t* codes = u.codes + b * 4096;
    for (int h = 0; h < 2; h++) {  // rows 8h .. 8h+7: bytes 32h .. 32h+31 of every slot
      const int32_t* ho = offs + 8 * h;
      auto put = [&](int slot, __m256i v) { _mm256_store_si256((__m256i*)(codes + slot * 64 + 32 * h), v); };
      if constexpr (KIND == K::Q6) {
        // Value 128c + 32p + 4s + e: ql dword 16c + 8(p % 2) + s, its low (p < 2) or high
        // nibbles, with bits 2p of qh dword 8c + s on top.
        for (int c = 0; c < 2; c++) {
          __m256i a[8], q[8];
          rows_to_slots(blk, ho, 128 + 32 * c, q);
          rows_to_slots(blk, ho, 64 * c, a);
          #pragma GCC unroll 8
          for (int s = 0; s < 8; s++) {
            auto top = [&](int p) { return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(q[s], 2 * p), m3), 4); };
            put(32 * c + s, _mm256_or_si256(_mm256_and_si256(a[s], m4), top(0)));
            put(32 * c + 16 + s, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a[s], 4), m4), top(2)));
          }
          rows_to_slots(blk, ho, 64 * c + 32, a);
          #pragma GCC unroll 8
          for (int s = 0; s < 8; s++) {
            auto top = [&](int p) { return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(q[s], 2 * p), m3), 4); };
            put(32 * c + 8 + s, _mm256_or_si256(_mm256_and_si256(a[s], m4), top(1)));
            put(32 * c + 24 + s, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a[s], 4), m4), top(3)));
          }
        }
      } else {
        // Value 64c + 4s + e: qs dword 8c + s's low nibbles, 64c + 32 + 4s + e its high ones;
        // Q5_K's fifth bit is bit 2c (2c + 1) of qh dword s.
        __m256i qh[8];
        if constexpr (KIND == K::Q5) rows_to_slots(blk, ho, 16, qh);
        const size_t qs = KIND == K::Q5 ? 48 : 16;
        for (int c = 0; c < 4; c++) {
          __m256i v[8];
          rows_to_slots(blk, ho, qs + 32 * c, v);
          #pragma GCC unroll 8
          for (int s = 0; s < 8; s++) {
            __m256i lo = _mm256_and_si256(v[s], m4), hi = _mm256_and_si256(_mm256_srli_epi16(v[s], 4), m4);
            if constexpr (KIND == K::Q5) {
              lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh[s], 2 * c), m1), 4));
              hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh[s], 2 * c + 1), m1), 4));
            }
            put(16 * c + s, lo);
            put(16 * c + 8 + s, hi);
          }
        }
      }
      // The scales, a row per lane, gathered: Q6_K's 16 signed bytes at 192 and f16 d at 208;
      // Q4_K/Q5_K's f16 (d, dmin) at 0 and 12 bytes of 6-bit (scale, min) pairs at 4, unpacked
      // as quant/kquant.h's kquant_unpack_scales does (here eight rows at once).
      const __m256i vo = _mm256_load_si256((const __m256i*)ho);
      auto gather = [&](int at) { return _mm256_i32gather_epi32((const int*)(blk + at), vo, 1); };
      int32_t* scale = u.scale + b * Sh::J * 16 + 8 * h;
      int32_t* pairs = u.pairs + b * Sh::P * 16 + 8 * h;
      if constexpr (KIND == K::Q6) {
        const __m256i sc[4] = {gather(192), gather(196), gather(200), gather(204)};
        store_scales<KIND>(sc, sc, scale, pairs);
        // d in the high half of the dword at 206: a block is 210 bytes.
        _mm256_store_ps(u.d + b * 16 + 8 * h, low_halves_as_floats(_mm256_srli_epi32(gather(206), 16)));
      } else {
        const __m256i p0 = gather(4), p1 = gather(8), p2 = gather(12);
        const __m256i sc[2] = {_mm256_and_si256(p0, m6),
                               _mm256_or_si256(_mm256_and_si256(p2, m4), _mm256_and_si256(_mm256_srli_epi32(p0, 2), top2))};
        const __m256i mn[2] = {_mm256_and_si256(p1, m6), _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(p2, 4), m4),
                                                                         _mm256_and_si256(_mm256_srli_epi32(p1, 2), top2))};
        store_scales<KIND>(sc, mn, scale, pairs);
        const __m256i dd = gather(0);  // f16 d low, dmin high
        _mm256_store_ps(u.d + b * 16 + 8 * h, low_halves_as_floats(dd));
        _mm256_store_ps(u.dmin + b * 16 + 8 * h, low_halves_as_floats(_mm256_srli_epi32(dd, 16)));
      }
    }
  }
}

inline __m256i bcast4(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// T tokens from t0 against one unpacked group (rows 16g ...), per super-block:
// Q4/Q5: y += xd * (d * sum_j sc_j dot_j  -  dmin * sum_j m_j sums32_j)
// Q6:    y += xd * d * (sum_j sc_j dot_j  -  32 * sum_j sc_j bsums_j)
// Vnni: a sub-block's slots summed in int32 by AVX-VNNI's vpdpbusd and multiplied by the row's
// scale once (vpmulld), the same exact integer as the int16 pairs' vpmaddwd, so both agree bit for
// bit (KQuant.AvxVnniTilesEqualAvx2TilesBitForBit).
template <bool Vnni, K KIND, int T>
void tile(const KActs& x, const Unpacked& u, int64_t g, int64_t rows, int64_t t0, float* y) {
  using Sh = Shape<KIND>;
  const int64_t nb = x.blocks;
  __m256 out[T][2];
  #pragma GCC unroll 4
  for (int t = 0; t < T; t++) out[t][0] = out[t][1] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; b++) {
    const int8_t* xq[T];
    const int16_t* sums[T];
    #pragma GCC unroll 4
    for (int t = 0; t < T; t++) {
      xq[t] = x.codes(t0 + t, b);
      sums[t] = KIND == K::Q6 ? x.bsums.data() + ((t0 + t) * nb + b) * 16 : x.sums32.data() + ((t0 + t) * nb + b) * 8;
    }
    const uint8_t* codes = u.codes + b * 4096;
    const int32_t* scale = u.scale + b * Sh::J * 16;
    __m256i acc[T][2];
    #pragma GCC unroll 4
    for (int t = 0; t < T; t++) acc[t][0] = acc[t][1] = _mm256_setzero_si256();
#if defined(__AVXVNNI__)
    if constexpr (Vnni) {
      #pragma GCC unroll 2
      for (int j = 0; j < Sh::J; j++) {
        __m256i p[T][2];
        #pragma GCC unroll 4
        for (int t = 0; t < T; t++) p[t][0] = p[t][1] = _mm256_setzero_si256();
        #pragma GCC unroll 8
        for (int s = 0; s < Sh::S; s++) {
          const int slot = j * Sh::S + s;
          const __m256i w0 = _mm256_load_si256((const __m256i*)(codes + slot * 64));
          const __m256i w1 = _mm256_load_si256((const __m256i*)(codes + slot * 64 + 32));
          #pragma GCC unroll 4
          for (int t = 0; t < T; t++) {
            const __m256i xv = bcast4(xq[t] + 4 * slot);
            p[t][0] = _mm256_dpbusd_avx_epi32(p[t][0], w0, xv);
            p[t][1] = _mm256_dpbusd_avx_epi32(p[t][1], w1, xv);
          }
        }
        #pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
          // The scale is stored twice as int16 (vpmaddwd's operand): its low half, sign-extended.
          const __m256i sc2 = _mm256_load_si256((const __m256i*)(scale + j * 16 + 8 * h));
          const __m256i sc = _mm256_srai_epi32(_mm256_slli_epi32(sc2, 16), 16);
          #pragma GCC unroll 4
          for (int t = 0; t < T; t++) acc[t][h] = _mm256_add_epi32(acc[t][h], _mm256_mullo_epi32(p[t][h], sc));
        }
      }
    } else
#endif
    {
    static_assert(!Vnni || kAvxVnniBuild, "the AVX-VNNI tiles need -mavxvnni");
    #pragma GCC unroll 2
    for (int j = 0; j < Sh::J; j++)
      #pragma GCC unroll 4
      for (int q = 0; q < Sh::S / kInt16Slots<KIND>; q++) {
        __m256i p[T][2];
        #pragma GCC unroll 4
        for (int t = 0; t < T; t++) p[t][0] = p[t][1] = _mm256_setzero_si256();
        #pragma GCC unroll 8
        for (int s = 0; s < kInt16Slots<KIND>; s++) {
          const int slot = j * Sh::S + q * kInt16Slots<KIND> + s;
          const __m256i w0 = _mm256_load_si256((const __m256i*)(codes + slot * 64));
          const __m256i w1 = _mm256_load_si256((const __m256i*)(codes + slot * 64 + 32));
          #pragma GCC unroll 4
          for (int t = 0; t < T; t++) {
            const __m256i xv = bcast4(xq[t] + 4 * slot);
            // Saturating adds (which never saturate here) because GCC reassociates plain ones
            // into a tree after all the products, spilling them.
            p[t][0] = _mm256_adds_epi16(p[t][0], _mm256_maddubs_epi16(w0, xv));
            p[t][1] = _mm256_adds_epi16(p[t][1], _mm256_maddubs_epi16(w1, xv));
          }
        }
        #pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
          const __m256i sc = _mm256_load_si256((const __m256i*)(scale + j * 16 + 8 * h));
          #pragma GCC unroll 4
          for (int t = 0; t < T; t++) acc[t][h] = _mm256_add_epi32(acc[t][h], _mm256_madd_epi16(p[t][h], sc));
        }
      }
    }
    #pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
      const __m256 d = _mm256_load_ps(u.d + b * 16 + 8 * h);
      #pragma GCC unroll 4
      for (int t = 0; t < T; t++) {
        __m256i c = _mm256_setzero_si256();
        #pragma GCC unroll 8
        for (int p = 0; p < Sh::P; p++)
          c = _mm256_add_epi32(c, _mm256_madd_epi16(_mm256_load_si256((const __m256i*)(u.pairs + (b * Sh::P + p) * 16 + 8 * h)),
                                                    bcast4(sums[t] + 2 * p)));
        const __m256 xd = _mm256_set1_ps(x.d[(size_t)((t0 + t) * nb + b)]);
        if constexpr (KIND == K::Q6) {
          const __m256 v = _mm256_cvtepi32_ps(_mm256_sub_epi32(acc[t][h], _mm256_slli_epi32(c, 5)));
          out[t][h] = _mm256_fmadd_ps(v, _mm256_mul_ps(d, xd), out[t][h]);
        } else {
          const __m256 dmin = _mm256_load_ps(u.dmin + b * 16 + 8 * h);
          const __m256 v = _mm256_fmsub_ps(d, _mm256_cvtepi32_ps(acc[t][h]), _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(c)));
          out[t][h] = _mm256_fmadd_ps(v, xd, out[t][h]);
        }
      }
    }
  }
  const int64_t r0 = g * 16, valid = std::min<int64_t>(16, rows - r0);
  #pragma GCC unroll 4
  for (int t = 0; t < T; t++) {
    float* dst = y + (t0 + t) * rows + r0;
    if (valid == 16) {
      _mm256_storeu_ps(dst, out[t][0]);
      _mm256_storeu_ps(dst + 8, out[t][1]);
    } else {
      alignas(32) float tmp[16];
      _mm256_store_ps(tmp, out[t][0]);
      _mm256_store_ps(tmp + 8, out[t][1]);
      std::memcpy(dst, tmp, (size_t)valid * sizeof(float));
    }
  }
}

template <bool Vnni, K KIND>
void groups(const KActs& x, const KQuantMatrix& w, int64_t g0, int64_t g1, float* y) {
  const int64_t nb = w.blocks();
  const size_t one = unpacked_bytes<KIND>(nb);
  thread_local std::vector<uint8_t> buf;  // grows to the largest shape once
  if (buf.size() < one + 32) buf.resize(one + 32);
  const Unpacked u = carve<KIND>(buf.data() + (32 - (uintptr_t)buf.data() % 32) % 32, nb);
  // Tokens in blocks of ~512 KB of activations (an AVX2 machine's L2 is 256 KB to 1 MB), each
  // group unpacked once per block.
  const int64_t tb = std::max<int64_t>(16, (512 * 1024) / w.cols() / 2 * 2);
  for (int64_t t0 = 0; t0 < x.n; t0 += tb) {
    const int64_t t1 = std::min(x.n, t0 + tb);
    for (int64_t g = g0; g < g1; g++) {
      unpack_group<KIND>(w, g, u);
      int64_t t = t0;
      for (; t + 2 <= t1; t += 2) tile<Vnni, KIND, 2>(x, u, g, w.rows(), t, y);
      if (t < t1) tile<Vnni, KIND, 1>(x, u, g, w.rows(), t, y);
    }
  }
}

}  // namespace
}  // namespace kvad::kernels
