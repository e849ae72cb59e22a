// Small x86 helpers shared by the *_avx2.cpp / *_avx512*.cpp kernel files. Include only from files
// compiled with AVX2 + F16C (or more). The functions have internal linkage on purpose: each
// kernel file compiles them with its own target flags, and one shared (inline, external) copy
// could let the linker hand an AVX-512 build of them to the AVX2 path.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "core/dtype.h"
#include "quant/packed.h"

namespace kvad::kernels {
namespace {

// This file is compiled with AVX-VNNI (-mavxvnni: *_avxvnni.cpp): a VNNI kernel template
// instantiated anywhere else would quietly take its fallback, so the templates assert it.
#if defined(__AVXVNNI__)
constexpr bool kAvxVnniBuild = true;
#else
constexpr bool kAvxVnniBuild = false;
#endif
// The same for AVX-512 VNNI (-mavx512vnni: *_avx512vnni.cpp and the AMX files).
#if defined(__AVX512VNNI__)
constexpr bool kAvx512VnniBuild = true;
#else
constexpr bool kAvx512VnniBuild = false;
#endif

// acc + the products of a's and b's int16 pairs, summed per int32 lane: AVX-512 VNNI's vpdpwssd,
// or vpmaddwd and an add (Skylake-SP) -- the same exact int32. A template, so the AVX2 files that
// include this never instantiate it.
template <bool Vnni>
__attribute__((always_inline)) inline __m512i add_int16_pair_products(__m512i acc, __m512i a, __m512i b) {
#if defined(__AVX512VNNI__)
  if constexpr (Vnni) return _mm512_dpwssd_epi32(acc, a, b);
#endif
  static_assert(!Vnni || kAvx512VnniBuild, "vpdpwssd needs -mavx512vnni");
  return _mm512_add_epi32(acc, _mm512_madd_epi16(a, b));
}

// 32 bytes loaded into a register once, for codes split into nibbles: see load_once below.
inline __m256i load_once256(const void* p) {
  __m256i v = _mm256_loadu_si256((const __m256i*)p);
  asm("" : "+x"(v));
  return v;
}

#if defined(__AVX512F__)
// 64 bytes loaded into a register once, for codes split into nibbles. Left to itself GCC folds the
// load into both instructions that read it (the low nibbles' AND and the high nibbles' shift),
// loading every line twice: a q4 decode block then issues ~26 load uops (llvm-mca), and the load
// ports are its bound when the weights are in cache. Kept in a register, one thread read a hot
// 896 x 896 q4 matrix 1.08-1.10x faster, the two alternating in one process (docs/kernels.md,
// "One load per line of codes").
inline __m512i load_once(const void* p) {
  __m512i v = _mm512_loadu_si512(p);
  asm("" : "+v"(v));  // an empty asm that "changes" v: the load can no longer be folded
  return v;
}
#endif

// Decode's software prefetch of weights it reads once: non-temporal, so a streamed line does not
// settle in L2 and then pass through L3 as a victim on its way out (the likely reason; no counters
// in this VM). With two threads NTA read the q4/q8 decode stack 1.03-1.2x faster than T0 and
// end-to-end decode ran 1.05x (q4) / 1.08x (q8); one thread alone reads the same with either
// (docs/kernels.md, "Decode: the prefetch hint").
// always_inline: a prefetch has no effect GCC can see, and a call to it that was not inlined yet
// is dead code to GCC's early DCE. So it went when the K-quant row walk moved into this header as
// a template (c67f221): the K-quant decode rows had no prefetch at all until 2026-12-07 evening
// (docs/kernels.md, "The K-quant decode's lost prefetch").
__attribute__((always_inline)) inline void prefetch_weights(const uint8_t* p) { _mm_prefetch((const char*)p, _MM_HINT_NTA); }

// The tiles' prefetch of the lines the next tile will read: into L2 (T1), as the lines ahead are
// more than L1 keeps (GroupPrefetch, prefetch_record_to_l2, tile_block_pass).
__attribute__((always_inline)) inline void prefetch_to_l2(const void* p) { _mm_prefetch((const char*)p, _MM_HINT_T1); }

// Every cache line of a q8/q4 record (quant/packed.h), `ahead` bytes past it, so one thread's
// sequential stream of records arrives before it is read.
template <QKind K>
__attribute__((always_inline)) inline void prefetch_record(const uint8_t* rec, int ahead) {  // inlined, as prefetch_weights
  constexpr int lines = (int)(QuantMatrix::record_bytes(K) + 63) / 64;
  #pragma GCC unroll 9
  for (int l = 0; l < lines; l++) prefetch_weights(rec + ahead + l * 64);
}

// A q8/q4 record's lines into L2: the prefill tiles' first pass over a few tokens (a batch of
// decoding sequences) brings the next groups' records while it works on these (docs/kernels.md,
// "Dense tiles for a few tokens").
template <QKind K>
__attribute__((always_inline)) inline void prefetch_record_to_l2(const uint8_t* rec) {
  constexpr int lines = (int)(QuantMatrix::record_bytes(K) + 63) / 64;
  #pragma GCC unroll 9
  for (int l = 0; l < lines; l++) prefetch_to_l2(rec + l * 64);
}

// The K-quant tiles' prefetch: while a group of 16 rows (from r0) is unpacked, the group two
// further on (rows r0 + 32 ..) is brought into L2, one nb-th of its bytes per super-block, so
// the tile's arithmetic on this pair of groups overlaps the next pair's reads. Without it a few
// tokens (a batch of 8 decoding sequences, a speculative check) waited on every group's lines: the
// Q4_K_M batch-8 decode step 57-66 ms, with it 36-38 (docs/kernels.md "K-quant tiles for a few
// tokens"). T1, not NTA or T0: the pair ahead is 18-55 KB, more than L1 keeps (NTA 51-57 ms, T0
// 54-64). One group ahead: 35.6-42.5 ms against two's 36.2-36.7; four the same as two.
class GroupPrefetch {
 public:
  template <typename Matrix>  // a KQuantMatrix (quant/kquant.h, not included here)
  GroupPrefetch(const Matrix& w, int64_t r0) {
    const int64_t ahead = r0 + 32, n = std::min<int64_t>(16, w.rows() - ahead);
    if (n <= 0 || w.blocks() <= 0) return;
    first_ = w.row_data(ahead);
    part_ = (size_t)n * w.row_bytes() / (size_t)w.blocks();  // n super-blocks' bytes
  }
  __attribute__((always_inline)) void part(int64_t b) const {
    for (size_t l = 0; l < part_; l += 64) prefetch_to_l2(first_ + (size_t)b * part_ + l);
  }

 private:
  const uint8_t* first_ = nullptr;
  size_t part_ = 0;  // bytes a super-block (0: no group ahead)
};

// The f16 stored at p (unaligned), as a float.
inline float f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// Eight rows' horizontal sums at once, each in the order of ggml's hsum_float_8 (high half plus
// low half, then lanes 0+2 and 1+3, then those two), so a K-quant row sums its lanes exactly as
// llama.cpp's ggml_vec_dot_q*_K_q8_K does. f[k] holds rows 2k (low 128 bits) and 2k+1 (high),
// 4 lanes each, already folded once; lane i of the result is row i.
inline __m256 sum8_folded(const __m256 f[4]) {
  const __m256 g0 = _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(_mm256_castps_pd(f[0]), _mm256_castps_pd(f[1]))),
                                  _mm256_castpd_ps(_mm256_unpackhi_pd(_mm256_castps_pd(f[0]), _mm256_castps_pd(f[1]))));
  const __m256 g1 = _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(_mm256_castps_pd(f[2]), _mm256_castps_pd(f[3]))),
                                  _mm256_castpd_ps(_mm256_unpackhi_pd(_mm256_castps_pd(f[2]), _mm256_castps_pd(f[3]))));
  // Per 128-bit lane: [rows 0 2 4 6 | 1 3 5 7], each the sum of its two halves.
  const __m256 h = _mm256_add_ps(_mm256_shuffle_ps(g0, g1, _MM_SHUFFLE(2, 0, 2, 0)), _mm256_shuffle_ps(g0, g1, _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm256_permutevar8x32_ps(h, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// Lane i = hsum_float_8(v[i]).
inline __m256 sum8(const __m256 v[8]) {
  __m256 f[4];
  #pragma GCC unroll 4
  for (int k = 0; k < 4; k++)
    f[k] = _mm256_add_ps(_mm256_permute2f128_ps(v[2 * k], v[2 * k + 1], 0x31), _mm256_permute2f128_ps(v[2 * k], v[2 * k + 1], 0x20));
  return sum8_folded(f);
}

// Lane i = the 4-lane sum of v[i] in ggml's order for acc_m ((0+2) + (1+3)).
inline __m256 sum8x4(const __m128 v[8]) {
  __m256 f[4];
  #pragma GCC unroll 4
  for (int k = 0; k < 4; k++) f[k] = _mm256_set_m128(v[2 * k + 1], v[2 * k]);
  return sum8_folded(f);
}

// The dense rows kernels' tiles (matmul_avx512.cpp, matmul_avx2.cpp) for a few tokens, a batch of
// decoding sequences: their first pass over a block of rows reads it from memory, and the 4 x 4
// tile's 32 FMAs per line of its four rows left the hardware prefetcher behind (bf16 head, 4
// tokens: 11-14 GB/s where one token streams 28). So each row's line is brought into L2 from the
// row one tile (kTileRows) on, the next tile's. 4 or 16 rows on: 27-29 GB/s; 8: 24; the same row
// 256 B to 4 KB ahead (mostly the tile's own next rows): 13-17 (docs/kernels.md, "Dense tiles for a
// few tokens").
constexpr int kTileRows = 4;

// Rows from r (a tile of kTileRows rows inside m) to the rows the prefetch reads: 0 for the last
// tile, so no address leaves the matrix.
inline int64_t tile_rows_ahead(int64_t r, int64_t m) { return std::min<int64_t>(kTileRows, m - kTileRows - r); }

// One pass of a group of tokens over rows [b0, b1) of an m-row matrix: tiles of kTileRows rows,
// then the rows left one at a time; `first` (the block's first pass, which reads it from
// memory) prefetches the rows ahead. tile(rows, prefetch, r, ahead) gets rows and prefetch as
// std::integral_constant, so each kernel picks its tile template from their types.
template <typename Tile>
__attribute__((always_inline)) inline void tile_block_pass(int64_t m, int64_t b0, int64_t b1, bool first, const Tile& tile) {
  using Four = std::integral_constant<int, kTileRows>;
  using One = std::integral_constant<int, 1>;
  int64_t r = b0;
  if (first)
    for (; r + kTileRows <= b1; r += kTileRows) tile(Four{}, std::true_type{}, r, tile_rows_ahead(r, m));
  for (; r + kTileRows <= b1; r += kTileRows) tile(Four{}, std::false_type{}, r, 0);
  for (; r < b1; r++) tile(One{}, std::false_type{}, r, 0);
}

// Eight K-quant rows' totals (lane i = row i) from their float lanes as the kqmatmul kernels keep
// them: ggml's hsum_float_8 of acc, plus Q4_K's 4 mins lanes (its acc_m order) or Q5_K's one.
template <DType TYPE>
inline __m256 kquant_row_totals(const __m256 acc[8], const __m128 accm[8]) {
  __m256 v = sum8(acc);
  if constexpr (TYPE == DType::Q4_K) v = _mm256_add_ps(v, sum8x4(accm));
  if constexpr (TYPE == DType::Q5_K)
    v = _mm256_add_ps(v, _mm256_setr_ps(accm[0][0], accm[1][0], accm[2][0], accm[3][0], accm[4][0], accm[5][0], accm[6][0], accm[7][0]));
  return v;
}

// The decode walk of the K-quant rows kernels (kqmatmul_avx2.cpp, kqmatmul_rows_avx512.h): rows
// r0 .. r1 of w one after another against T tokens from t0, so this thread's share of W is one
// sequential stream, prefetched 4 KB ahead (two rows in flight, two streams a row apart, read less
// of a Q4_K_M stack in kvad_micro's BM_kqdecode_stack: docs/kernels.md). dot(blk, b, acc, accm)
// adds super-block b of a row (its kBlockBytes at blk) into acc[t] / accm[t] for each token t.
// Each row's float lanes wait in `part` and eight rows are summed together (kquant_row_totals, in
// ggml's order): a row of 1024 inputs is only 4 super-blocks, and a horizontal sum of its own
// would be a tenth of its instructions, ending on a chain of dependent adds.
template <DType TYPE, size_t kBlockBytes, int T, typename Matrix, typename Dot>
__attribute__((always_inline)) inline void kquant_rows_walk(const Matrix& w, int64_t r0, int64_t r1, int64_t t0, float* y,
                                                             Dot&& dot) {
  constexpr size_t kAhead = 4096;
  const int64_t nb = w.blocks();
  const uint8_t* base = w.row_data(0);
  const size_t row_bytes = (size_t)nb * kBlockBytes;
  __m256 part[T][8];
  __m128 partm[T][8];
  for (int64_t g = r0; g < r1; g += 8) {
    const int n = (int)std::min<int64_t>(8, r1 - g);
    for (int i = 0; i < 8; i++) {
      __m256 acc[T];
      __m128 accm[T];
      #pragma GCC unroll 8
      for (int t = 0; t < T; t++) acc[t] = _mm256_setzero_ps(), accm[t] = _mm_setzero_ps();
      const uint8_t* row = base + (size_t)(g + std::min(i, n - 1)) * row_bytes;
      for (int64_t b = 0; b < nb && i < n; b++) {
        const uint8_t* blk = row + (size_t)b * kBlockBytes;
        #pragma GCC unroll 4
        for (size_t l = 0; l < kBlockBytes; l += 64) prefetch_weights(blk + kAhead + l);
        dot(blk, b, acc, accm);
      }
      #pragma GCC unroll 8
      for (int t = 0; t < T; t++) part[t][i] = acc[t], partm[t][i] = accm[t];
    }
    const __m256i keep = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    #pragma GCC unroll 8
    for (int t = 0; t < T; t++) _mm256_maskstore_ps(y + (t0 + t) * w.rows() + g, keep, kquant_row_totals<TYPE>(part[t], partm[t]));
  }
}

// The 8 (scale, min) 6-bit pairs of a Q4_K/Q5_K super-block (12 bytes at p; 16 are read) as
// bytes 0-7 scales, 8-15 mins: quant/kquant.h's kquant_unpack_scales, four bytes a lane, in
// registers (unpacked through memory, a 16-byte load of four 4-byte stores waits for them).
inline __m128i kquant_scales_mins(const uint8_t* p) {
  const __m128i u = _mm_loadu_si128((const __m128i*)p);
  const __m128i a = _mm_srlv_epi32(_mm_shuffle_epi32(u, _MM_SHUFFLE(2, 1, 2, 0)), _mm_setr_epi32(0, 0, 0, 4));
  const __m128i b = _mm_srli_epi32(_mm_shuffle_epi32(u, _MM_SHUFFLE(1, 1, 0, 0)), 2);
  const __m128i keep = _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f);
  const __m128i high = _mm_setr_epi32(0, 0x30303030, 0, 0x30303030);
  return _mm_or_si128(_mm_and_si128(a, keep), _mm_and_si128(b, high));
}

// The same 8 scales and 8 mins in two general-purpose registers (byte j = sub-block j), for the
// decode rows: there the vector form's six shuffles, shifts and masks sit at the head of every
// super-block's chain on the vector pipes, while the integer ones are idle (Zen 4, one thread, hot:
// Q4_K 0.97-1.10x in old/new pairs, median 1.05x; the AVX2 rows measured 0.96-1.2x and keep the
// vector form).
__attribute__((always_inline)) inline void kquant_scales_mins_u64(const uint8_t* p, uint64_t& scales, uint64_t& mins) {
  uint64_t lo;  // bytes 0-3: scales 0-3 (6 bits) + 2 high bits of 4-7; bytes 4-7: the same for the mins
  uint32_t hi;  // bytes 8-11: low nibble scale 4+j's low 4 bits, high nibble min 4+j's
  std::memcpy(&lo, p, 8);
  std::memcpy(&hi, p + 8, 4);
  const uint64_t low6 = lo & 0x3f3f3f3f3f3f3f3full;
  const uint64_t upper = ((lo >> 2) & 0x3030303030303030ull) | (hi & 0x0f0f0f0fu) | ((uint64_t)((hi >> 4) & 0x0f0f0f0fu) << 32);
  scales = (low6 & 0xffffffffull) | (upper << 32);
  mins = (low6 >> 32) | (upper & 0xffffffff00000000ull);
}

// The first n of 8 lanes (n clamped to 0..8), as a maskload/maskstore operand: AVX2's tails.
inline __m256i lanes8(int64_t n) {
  const int m = n < 0 ? 0 : n > 8 ? 8 : (int)n;
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(m), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// Sum of the 8 lanes.
inline float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

#if defined(__AVX512F__)
// max of x[0, n): two accumulators over full vectors, then the masked tail.
inline float row_max(const float* x, int64_t n) {
  __m512 mx0 = _mm512_set1_ps(-INFINITY), mx1 = mx0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    mx0 = _mm512_max_ps(mx0, _mm512_loadu_ps(x + i));
    mx1 = _mm512_max_ps(mx1, _mm512_loadu_ps(x + i + 16));
  }
  for (; i < n; i += 16) {
    __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
    mx0 = _mm512_mask_max_ps(mx0, m, mx0, _mm512_maskz_loadu_ps(m, x + i));
  }
  return _mm512_reduce_max_ps(_mm512_max_ps(mx0, mx1));
}
#endif

}  // namespace
}  // namespace kvad::kernels
