// The attention loops over paged K/V, written once over a small SIMD trait and instantiated per
// ISA in attention*.cpp. Included only by those files.
//   decode (few queries): per KV head, one pass over the cached keys computes the scores of all
//     the query heads that share it (dot), one pass over the values accumulates them (axpy).
//   prefill (many queries): per KV head and chunk of queries, S = Q K^T and O = softmax(S) V as
//     register-blocked matrix products (gemm_nn), causal mask applied to S. A dot product per
//     score spends most of its time in the horizontal sum; the products amortise it away.
#pragma once
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/threads.h"
#include "kernels/attention.h"
#include "kernels/gemm.h"

namespace kvad::kernels::detail {

// The first cnt rows of one block and KV head of one side (kv.k or kv.v) as floats: in place for
// f32, converted into tile (block_size * head_dim floats, in L1) by V's widening loops for the
// other types.
template <typename V>
const float* kv_rows(const uint8_t* side, const KvPages& kv, int32_t block, int h, int nkv, int hd, int64_t cnt,
                     float* tile) {
  const int64_t rb = kv_row_bytes(kv.type, hd);
  const uint8_t* p = kv_block_rows(side, kv, block, h, nkv, rb);
  switch (kv.type) {
    case KvType::F32:
      return reinterpret_cast<const float*>(p);
    case KvType::BF16:
      V::widen_bf16(reinterpret_cast<const uint16_t*>(p), tile, cnt * hd);
      return tile;
    case KvType::Q8:
      for (int64_t j = 0; j < cnt; j++) {
        const int8_t* q = reinterpret_cast<const int8_t*>(p + j * rb);
        float scale;
        std::memcpy(&scale, q + hd, sizeof scale);
        V::dequant_q8(q, scale, tile + j * hd, hd);
      }
      return tile;
  }
  return tile;
}

// A q8 block's per-position key scales (after its [head_dim][block_size] int8, kv_store) into
// `scales`: copied, as they may sit off a float's alignment.
inline const float* copy_key_scales(const uint8_t* keys, int64_t hd, int64_t bs, float* scales) {
  std::memcpy(scales, keys + hd * bs, (size_t)bs * sizeof(float));
  return scales;
}

// One block's keys of KV head h, stored by dimension ([head_dim][block_size], bf16 or q8), widened
// into tile (block_size * head_dim floats): q8's int8 unscaled, its per-position scales copied
// into `scales` (returned; null for bf16): a key's scale multiplies each of its elements once read.
template <typename V>
const float* key_columns(const uint8_t* side, const KvPages& kv, int32_t block, int h, int nkv, int hd, float* tile,
                         float* scales, const float** scale_out) {
  const int64_t rb = kv_row_bytes(kv.type, hd), bs = kv.block_size;
  const uint8_t* p = kv_block_rows(side, kv, block, h, nkv, rb);
  *scale_out = nullptr;
  if (kv.type == KvType::BF16) {
    V::widen_bf16(reinterpret_cast<const uint16_t*>(p), tile, bs * hd);
  } else {
    V::dequant_q8(reinterpret_cast<const int8_t*>(p), 1.0f, tile, (int)(bs * hd));
    *scale_out = copy_key_scales(p, hd, bs, scales);
  }
  return tile;
}

// Asks for one block's rows of one KV head ahead of use. A decode step reads each head's blocks
// once, 4 KB here and 4 KB a head further on, a pattern the hardware prefetcher did not follow:
// without this the loads waited on memory (docs/kernels.md). always_inline: as x86_helpers.h's
// prefetch_weights, a prefetch behind a call not yet inlined is dead code to GCC.
__attribute__((always_inline)) inline void prefetch_block(const uint8_t* side, const KvPages& kv, int32_t block, int h, int nkv, int hd) {
  const int64_t rb = kv_row_bytes(kv.type, hd), bytes = kv.block_size * rb;
  const uint8_t* p = kv_block_rows(side, kv, block, h, nkv, rb);
  for (int64_t i = 0; i < bytes; i += 64) __builtin_prefetch(p + i, 0, 3);
}

struct DecodeScratch {
  std::vector<float> scores, tile, key_scales;
};

// out[j] = dot(q, rows + j * stride) over n columns, for the cnt <= V::W rows of one tile: one
// accumulator per row, and one transposing reduction (V::row_sums) for the whole tile where a
// horizontal sum per score was most of a decode step's attention time. A short tile (Full false)
// repeats its last row in the unused accumulators. At AVX-512 four vectors of q stay in registers
// while the tile's rows pass, one row pointer at a time: with a pointer per row (16) they spilled
// to the stack and were reloaded before every load (docs/kernels.md, "Decode attention"). Each
// accumulator still sums its products in the order of d.
template <typename V, bool Full>
inline void dot_rows(const float* q, const float* rows, int64_t stride, int64_t cnt, int n, float* out) {
  using reg = typename V::reg;
  // C vectors of q a pass: 4 at AVX-512 (its 16 row pointers do not fit the registers), 1 below
  // (AVX2's 8 pointers do, and 4 there read 2-9% slower in BM_attention at 512 positions).
  constexpr int W = V::W, C = W >= 16 ? 4 : 1;
  reg acc[W];
#pragma GCC unroll 16
  for (int j = 0; j < W; j++) acc[j] = V::zero();
  auto row = [&](int j) { return rows + (Full ? j : std::min<int64_t>(j, cnt - 1)) * stride; };
  int d = 0;
  for (; d + C * W <= n; d += C * W) {
    reg qv[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; c++) qv[c] = V::load(q + d + c * W, W);
#pragma GCC unroll 16
    for (int j = 0; j < W; j++) {
      const float* r = row(j) + d;
#pragma GCC unroll 4
      for (int c = 0; c < C; c++) acc[j] = V::fmadd(qv[c], V::load(r + c * W, W), acc[j]);
    }
  }
  for (; d + W <= n; d += W) {  // whole vectors: no masks
    const reg qv = V::load(q + d, W);
#pragma GCC unroll 16
    for (int j = 0; j < W; j++) acc[j] = V::fmadd(qv, V::load(row(j) + d, W), acc[j]);
  }
  if (d < n) {
    const reg qv = V::load(q + d, n - d);  // masked: zero past n, so the products there are zero
#pragma GCC unroll 16
    for (int j = 0; j < W; j++) acc[j] = V::fmadd(qv, V::load(row(j) + d, n - d), acc[j]);
  }
  alignas(64) float sums[W];
  V::row_sums(acc, sums);
  for (int64_t j = 0; j < cnt; j++) out[j] = sums[j];
}

// out[h * out_stride + j] = scale[j] * sum over d of q[h * hd + d] * keys[d * ld + j], for H heads
// and the c <= V::W positions j of one tile of keys stored by dimension (scale null: 1). Each
// dimension is one vector of the tile's keys times a broadcast of each head's query value, so the
// scores come out as vectors: no horizontal sums, where the row layout's dot products spent as
// many instructions reducing as multiplying. Even and odd dimensions go to separate accumulators,
// 2H independent chains for the FMA latency.
template <typename V, int H, typename T>
inline void dim_scores(const float* q, int hd, const T* keys, int64_t ld, int64_t c, const float* scale, float* out,
                       int64_t out_stride) {
  using reg = typename V::reg;
  reg even[H], odd[H];
#pragma GCC unroll 8
  for (int h = 0; h < H; h++) even[h] = odd[h] = V::zero();
  int d = 0;
  for (; d + 2 <= hd; d += 2) {
    const reg k0 = V::load(keys + d * ld, c), k1 = V::load(keys + (d + 1) * ld, c);
#pragma GCC unroll 8
    for (int h = 0; h < H; h++) {
      even[h] = V::fmadd(V::set1(q[h * hd + d]), k0, even[h]);
      odd[h] = V::fmadd(V::set1(q[h * hd + d + 1]), k1, odd[h]);
    }
  }
  if (d < hd) {
    const reg k0 = V::load(keys + d * ld, c);
#pragma GCC unroll 8
    for (int h = 0; h < H; h++) even[h] = V::fmadd(V::set1(q[h * hd + d]), k0, even[h]);
  }
  const reg sc = scale ? V::load(scale, c) : V::set1(1.0f);
#pragma GCC unroll 8
  for (int h = 0; h < H; h++) V::store(out + h * out_stride, V::mul(V::add(even[h], odd[h]), sc), c);
}

// dim_scores for n <= kDimHeads heads: the count as a template argument.
template <typename V, typename T>
inline void dim_scores_n(int n, const float* q, int hd, const T* keys, int64_t ld, int64_t c, const float* scale,
                         float* out, int64_t out_stride) {
  switch (n) {
    case 1: return dim_scores<V, 1>(q, hd, keys, ld, c, scale, out, out_stride);
    case 2: return dim_scores<V, 2>(q, hd, keys, ld, c, scale, out, out_stride);
    case 3: return dim_scores<V, 3>(q, hd, keys, ld, c, scale, out, out_stride);
    case 4: return dim_scores<V, 4>(q, hd, keys, ld, c, scale, out, out_stride);
  }
  if constexpr (V::kDimHeads > 4) {
    switch (n) {
      case 5: return dim_scores<V, 5>(q, hd, keys, ld, c, scale, out, out_stride);
      case 6: return dim_scores<V, 6>(q, hd, keys, ld, c, scale, out, out_stride);
      case 7: return dim_scores<V, 7>(q, hd, keys, ld, c, scale, out, out_stride);
      case 8: return dim_scores<V, 8>(q, hd, keys, ld, c, scale, out, out_stride);
    }
  }
}

// The scores of query heads 0..ng-1 (q: [ng][hd]) against positions 0..cnt-1 of one block's keys
// stored by dimension (bf16 or q8), into out[g * out_stride + j]: read in the cache's type and
// widened in the registers, no tile written and read back.
template <typename V>
void block_scores(const float* q, int ng, int hd, const uint8_t* keys, KvType type, int64_t bs, int64_t cnt,
                  float* scales, float* out, int64_t out_stride) {
  const float* scale = type == KvType::Q8 ? copy_key_scales(keys, hd, bs, scales) : nullptr;
  for (int64_t jt = 0; jt < cnt; jt += V::W) {
    const int64_t c = std::min<int64_t>(V::W, cnt - jt);
    for (int g = 0; g < ng; g += V::kDimHeads) {
      const int n = std::min(V::kDimHeads, ng - g);
      float* o = out + g * out_stride + jt;
      const float* sc = scale ? scale + jt : nullptr;
      if (type == KvType::BF16)
        dim_scores_n<V>(n, q + g * hd, hd, reinterpret_cast<const uint16_t*>(keys) + jt, bs, c, sc, o, out_stride);
      else
        dim_scores_n<V>(n, q + g * hd, hd, reinterpret_cast<const int8_t*>(keys) + jt, bs, c, sc, o, out_stride);
    }
  }
}

// For the H heads h: y[h * y_stride + 0..n) += sum over the cnt rows j of p[h * p_stride + j] *
// rows[j * stride ..]. Each value row is loaded once for H heads, and y stays in registers (H x 4
// vectors) across the rows, where an axpy per head and row reloaded both.
template <typename V, int H, typename T>
inline void accumulate_rows(float* y, int64_t y_stride, const float* p, int64_t p_stride, const T* rows,
                            int64_t stride, int64_t cnt, int n) {
  using reg = typename V::reg;
  constexpr int W = V::W;
  int d = 0;
  for (; d + 4 * W <= n; d += 4 * W) {
    reg a[H][4];
#pragma GCC unroll 4
    for (int h = 0; h < H; h++)
#pragma GCC unroll 4
      for (int i = 0; i < 4; i++) a[h][i] = V::load(y + h * y_stride + d + i * W, W);
    for (int64_t j = 0; j < cnt; j++) {
      const T* r = rows + j * stride + d;
      const reg v0 = V::load(r, W), v1 = V::load(r + W, W), v2 = V::load(r + 2 * W, W), v3 = V::load(r + 3 * W, W);
#pragma GCC unroll 4
      for (int h = 0; h < H; h++) {
        const reg ph = V::set1(p[h * p_stride + j]);
        a[h][0] = V::fmadd(ph, v0, a[h][0]);
        a[h][1] = V::fmadd(ph, v1, a[h][1]);
        a[h][2] = V::fmadd(ph, v2, a[h][2]);
        a[h][3] = V::fmadd(ph, v3, a[h][3]);
      }
    }
#pragma GCC unroll 4
    for (int h = 0; h < H; h++)
#pragma GCC unroll 4
      for (int i = 0; i < 4; i++) V::store(y + h * y_stride + d + i * W, a[h][i], W);
  }
  for (; d < n; d += W) {
    const int64_t m = n - d < W ? n - d : W;
    reg a[H];
#pragma GCC unroll 4
    for (int h = 0; h < H; h++) a[h] = V::load(y + h * y_stride + d, m);
    for (int64_t j = 0; j < cnt; j++) {
      const reg v = V::load(rows + j * stride + d, m);
#pragma GCC unroll 4
      for (int h = 0; h < H; h++) a[h] = V::fmadd(V::set1(p[h * p_stride + j]), v, a[h]);
    }
#pragma GCC unroll 4
    for (int h = 0; h < H; h++) V::store(y + h * y_stride + d, a[h], m);
  }
}

// y[g] += sum over the cnt rows j of p[g * p_stride + j] * rows[j * stride ..] for the ng heads g
// of a group: heads in fours (AVX-512: 16 accumulators of its 32 registers), twos with 16
// registers; the rest (fewer than 4: at most 12 accumulators) at once.
template <typename V, typename T>
void block_values(float* y, int dv, const float* p, int64_t p_stride, int ng, const T* rows, int64_t stride,
                  int64_t cnt) {
  constexpr int H = V::W >= 16 ? 4 : 2;
  int g = 0;
  for (; g + H <= ng; g += H) accumulate_rows<V, H>(y + g * dv, dv, p + g * p_stride, p_stride, rows, stride, cnt, dv);
  y += g * dv, p += g * p_stride;
  switch (ng - g) {  // the rest of the group at once (Qwen2.5's 7 heads: 4 + 3)
    case 3: accumulate_rows<V, 3>(y, dv, p, p_stride, rows, stride, cnt, dv); break;
    case 2: accumulate_rows<V, 2>(y, dv, p, p_stride, rows, stride, cnt, dv); break;
    case 1: accumulate_rows<V, 1>(y, dv, p, p_stride, rows, stride, cnt, dv); break;
  }
}

// Decode (few queries): one query row t of a span and one KV head h, for the query heads g0..g1-1
// of its group. One pass over the cached keys computes the scores of those heads (a tile of
// V::W keys at a time), one pass over the values accumulates them; both walk the span's blocks
// in order.
template <typename V>
void attend_decode(const float* q, int64_t q_stride, const AttentionSpan& sp, int64_t t, int h, int g0, int g1,
                   const AttentionShape& s, const KvPages& kv, float* out, int64_t out_stride, DecodeScratch& w) {
  const int G = s.n_heads / s.n_kv_heads, hd = s.head_dim, dv = s.v_dim(), nkv = s.n_kv_heads, ng = g1 - g0;
  const int64_t len = sp.pos0 + t + 1, bs = kv.block_size;  // causal: keys 0..p
  std::vector<float>& scores = w.scores;
  if ((int64_t)scores.size() < ng * len) scores.resize((size_t)(ng * len));
  if ((int64_t)w.tile.size() < bs * hd) w.tile.resize((size_t)(bs * hd));
  const float* qg = q + (sp.row0 + t) * q_stride + (h * G + g0) * hd;
  constexpr int64_t ahead = 2;  // blocks
  const bool by_dim = kv.keys_by_dimension();
  const int64_t rb = kv_row_bytes(kv.type, hd);
  if (by_dim && (int64_t)w.key_scales.size() < bs) w.key_scales.resize((size_t)bs);
  for (int64_t j0 = 0; j0 < len; j0 += bs) {
    const int64_t cnt = std::min(bs, len - j0);
    if (j0 + ahead * bs < len) prefetch_block(kv.k, kv, sp.blocks[j0 / bs + ahead], h, nkv, hd);
    if (by_dim) {
      block_scores<V>(qg, ng, hd, kv_block_rows(kv.k, kv, sp.blocks[j0 / bs], h, nkv, rb), kv.type,
                      bs, cnt, w.key_scales.data(), scores.data() + j0, len);
      continue;
    }
    const float* kb = kv_rows<V>(kv.k, kv, sp.blocks[j0 / bs], h, nkv, hd, cnt, w.tile.data());
    for (int64_t jt = 0; jt < cnt; jt += V::W) {
      const int64_t c = std::min<int64_t>(V::W, cnt - jt);
      for (int g = 0; g < ng; g++) {
        float* sg = scores.data() + g * len + j0 + jt;
        if (c == V::W) dot_rows<V, true>(qg + g * hd, kb + jt * hd, hd, c, hd, sg);
        else dot_rows<V, false>(qg + g * hd, kb + jt * hd, hd, c, hd, sg);
      }
    }
  }
  for (int g = 0; g < ng; g++) V::softmax(scores.data() + g * len, len, s.scale);
  float* og = out + (sp.row0 + t) * out_stride + (h * G + g0) * dv;
  std::fill(og, og + ng * dv, 0.0f);
  for (int64_t j0 = 0; j0 < len; j0 += bs) {
    const int64_t cnt = std::min(bs, len - j0);
    if (j0 + ahead * bs < len) prefetch_block(kv.v, kv, sp.blocks[j0 / bs + ahead], h, nkv, hd);
    const uint8_t* vb = kv_block_rows(kv.v, kv, sp.blocks[j0 / bs], h, nkv, rb);
    float* pb = scores.data() + j0;
    switch (kv.type) {  // rows read in the cache's type, widened in the registers
      case KvType::F32: block_values<V>(og, dv, pb, len, ng, reinterpret_cast<const float*>(vb), hd, cnt); break;
      case KvType::BF16: block_values<V>(og, dv, pb, len, ng, reinterpret_cast<const uint16_t*>(vb), hd, cnt); break;
      case KvType::Q8: {
        // A row is its int8 values times its scale: the scale goes into the row's probabilities.
        for (int64_t j = 0; j < cnt; j++) {
          float sc;
          std::memcpy(&sc, vb + j * rb + hd, sizeof sc);
          for (int g = 0; g < ng; g++) pb[g * len + j] *= sc;
        }
        block_values<V>(og, dv, pb, len, ng, reinterpret_cast<const int8_t*>(vb), rb, cnt);
        break;
      }
    }
  }
}

// C[M, N] = A[M, K] * B[K, N], all row-major with leading dimensions: 4-row x 2-vector tiles of
// accumulators, B streamed one row at a time and each A element broadcast.
template <typename V, int R>
inline void gemm_tile(const float* A, int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc, int64_t K,
                      int64_t j0, int64_t nj) {
  using reg = typename V::reg;
  reg acc[R][2];
#pragma GCC unroll 4
  for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = V::zero();
  const int64_t w = V::W, n0 = nj < w ? nj : w, n1 = nj - n0;
  for (int64_t kk = 0; kk < K; kk++) {
    const float* b = B + kk * ldb + j0;
    reg b0 = V::load(b, n0), b1 = n1 > 0 ? V::load(b + w, n1) : V::zero();
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
      reg a = V::set1(A[r * lda + kk]);
      acc[r][0] = V::fmadd(a, b0, acc[r][0]);
      acc[r][1] = V::fmadd(a, b1, acc[r][1]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; r++) {
    V::store(C + r * ldc + j0, acc[r][0], n0);
    if (n1 > 0) V::store(C + r * ldc + j0 + w, acc[r][1], n1);
  }
}

template <typename V>
void gemm_nn(const float* A, int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc, int64_t M, int64_t N,
             int64_t K) {
  const int64_t strip = 2 * V::W;
  for (int64_t j = 0; j < N; j += strip) {
    int64_t nj = N - j < strip ? N - j : strip, i = 0;
    for (; i + 4 <= M; i += 4) gemm_tile<V, 4>(A + i * lda, lda, B, ldb, C + i * ldc, ldc, K, j, nj);
    for (; i < M; i++) gemm_tile<V, 1>(A + i * lda, lda, B, ldb, C + i * ldc, ldc, K, j, nj);
  }
}

// Prefill (many queries): one KV head h and queries t0..t1 of a span. S = Q K^T and
// O = softmax(S) V as register-blocked matrix products, causal mask applied to S. The keys and
// values are gathered from the pages into buffers laid out for the product and sized for the
// span's whole length: a thread that goes on with the same span and head at the next chunk (its
// items come in that order) gathers only the keys the chunk adds. Gathering each chunk's whole
// prefix again was 4.5x the copying at 512 tokens, and its scalar transposing stores took as long
// as the S = Q K^T product (perf, qwen3-0.6b prefill 512).
//
// With V::kPanels (AVX-512) the layouts are gemm.h's panels of 32 outputs and the products its
// 12 x 32 micro-tiles (24 accumulators): keys as W [L, head_dim], values as W = V^T [v_dim, L]
// in panels as deep as the span. Otherwise K^T [head_dim, span] and V [span, v_dim] row-major and
// gemm_nn's 4 x 2-vector tiles, which ran the products at ~40% of the FMA rate there (perf: a
// branch per step and 8 accumulators).
struct PrefillScratch {
  std::vector<float> qa, kt, vg, sc, o, tile, key_scales;
  PackedWeight kp, vp;  // V::kPanels: keys [L][head_dim] and values^T [v_dim][span] in panels
  // What the key and value buffers hold: keys 0..gathered of (call, span, head).
  uint64_t call = 0;
  int64_t span = -1, gathered = 0;
  int head = -1;
};

template <typename V>
void attend_prefill(const float* q, int64_t q_stride, const AttentionSpan& sp, int64_t span_index, uint64_t call,
                    int64_t t0, int64_t t1, int h, const AttentionShape& s, const KvPages& kv, float* out,
                    int64_t out_stride, PrefillScratch& w) {
  const int G = s.n_heads / s.n_kv_heads, hd = s.head_dim, dv = s.v_dim(), nkv = s.n_kv_heads;
  const int64_t rows = (t1 - t0) * G, L = sp.pos0 + t1, bs = kv.block_size;  // keys the chunk's last query sees
  const int64_t ld = sp.pos0 + sp.n;  // every key of the span
  constexpr int64_t P = 32;           // gemm.h's panel width
  auto fit = [](std::vector<float>& b, int64_t n) {
    if ((int64_t)b.size() < n) b.resize((size_t)n);
  };
  if (w.call != call || w.span != span_index || w.head != h) {
    w.call = call, w.span = span_index, w.head = h, w.gathered = 0;
    if constexpr (V::kPanels) {
      fit(w.kp.f32, (ld + P - 1) / P * P * hd);
      fit(w.vp.f32, (dv + P - 1) / P * P * ld);
    } else {
      fit(w.kt, hd * ld);
      fit(w.vg, ld * dv);
    }
  }
  fit(w.qa, rows * hd);
  fit(w.sc, rows * L);
  fit(w.o, rows * dv);
  fit(w.tile, bs * hd);
  const bool by_dim = kv.keys_by_dimension();
  if (by_dim) fit(w.key_scales, bs);
  for (int64_t t = t0; t < t1; t++)
    for (int g = 0; g < G; g++)
      std::copy_n(q + (sp.row0 + t) * q_stride + (h * G + g) * hd, hd, w.qa.data() + ((t - t0) * G + g) * hd);
  for (int64_t j0 = w.gathered / bs * bs; j0 < L; j0 += bs) {  // from the block holding the first new key
    const int64_t from = std::max(j0, w.gathered) - j0, cnt = std::min(bs, L - j0);
    // Key j's element d at kb[j * js + d * ds] (rows, or by dimension: docs in attention.h).
    const float* scale = nullptr;
    const float* kb = by_dim ? key_columns<V>(kv.k, kv, sp.blocks[j0 / bs], h, nkv, hd, w.tile.data(), w.key_scales.data(), &scale)
                             : kv_rows<V>(kv.k, kv, sp.blocks[j0 / bs], h, nkv, hd, cnt, w.tile.data());
    const int64_t js = by_dim ? 1 : hd, ds = by_dim ? bs : 1;
    for (int64_t j = from; j < cnt; j++) {
      const int64_t key = j0 + j;
      const float sj = scale ? scale[j] : 1.0f;
      if constexpr (V::kPanels) {  // panel key / 32, [head_dim][32]
        float* panel = w.kp.f32.data() + key / P * P * hd + key % P;
        for (int d = 0; d < hd; d++) panel[d * P] = kb[j * js + d * ds] * sj;
      } else {
        for (int d = 0; d < hd; d++) w.kt[(size_t)(d * ld + key)] = kb[j * js + d * ds] * sj;
      }
    }
    const float* vb = kv_rows<V>(kv.v, kv, sp.blocks[j0 / bs], h, nkv, hd, cnt, w.tile.data());
    for (int64_t j = from; j < cnt; j++) {
      const int64_t key = j0 + j;
      if constexpr (V::kPanels) {  // panel c / 32, [span][32]: 32 values of the key a row
        for (int c = 0; c < dv; c += P)
          std::copy_n(vb + j * hd + c, std::min<int64_t>(P, dv - c), w.vp.f32.data() + (c / P * ld + key) * P);
      } else {
        std::copy_n(vb + j * hd, dv, w.vg.data() + key * dv);
      }
    }
  }
  w.gathered = std::max(w.gathered, L);
  if constexpr (V::kPanels) {
    w.kp.m = L, w.kp.k = hd;
    V::gemm_panels(w.qa.data(), w.kp, rows, w.sc.data(), 0);
  } else {
    gemm_nn<V>(w.qa.data(), hd, w.kt.data(), ld, w.sc.data(), L, rows, L, hd);
  }
  for (int64_t r = 0; r < rows; r++) {
    int64_t valid = sp.pos0 + t0 + r / G + 1;  // causal: keys 0 .. position of this query
    float* row = w.sc.data() + r * L;
    V::softmax(row, valid, s.scale);
    std::fill(row + valid, row + L, 0.0f);
  }
  if constexpr (V::kPanels) {
    w.vp.m = dv, w.vp.k = L;
    V::gemm_panels(w.sc.data(), w.vp, rows, w.o.data(), ld);
  } else {
    gemm_nn<V>(w.sc.data(), L, w.vg.data(), dv, w.o.data(), dv, rows, dv, L);
  }
  for (int64_t t = t0; t < t1; t++)
    for (int g = 0; g < G; g++)
      std::copy_n(w.o.data() + ((t - t0) * G + g) * dv, dv, out + (sp.row0 + t) * out_stride + (h * G + g) * dv);
}

// One unit of attention work: a decode row (t1 = t0 + 1) of query heads g0..g1-1 of one KV head's
// group, or a chunk of prefill queries of one KV head (all its group).
struct AttentionItem {
  int32_t span;
  int32_t kv_head;
  int64_t t0, t1;
  bool prefill;
  int32_t g0 = 0, g1 = 0;
};

// The whole batch in one parallel region. A span of two or more queries whose queries times the
// group size reach 16 (and that is not `rowwise`) goes through the matrix-product path in chunks
// of up to 64 queries (S stays within a few MB); the others are decode rows. A single query stays
// a decode row however many heads share its KV head: the product path would gather the keys
// transposed for 1 query (MLA: 576-wide keys, 3x slower there). When the decode rows are fewer
// than the threads, a large group is split into parts of at least 4 query heads (MLA's 16 or 128
// heads on one KV head would otherwise run on one thread); every head computes the same either way.
// Prefill items come first so the heavy ones spread over the threads.
template <typename V>
void attention_paged_impl(const float* q, int64_t q_stride, const AttentionSpan* spans, int64_t n_spans,
                          const AttentionShape& s, const KvPages& kv, float* out, int64_t out_stride) {
  const int G = s.n_heads / s.n_kv_heads;
  // 64 queries a chunk, fewer when many query heads share a KV head (MLA: all of them), so that a
  // chunk's score matrix stays at most 1024 rows.
  const int64_t chunk = std::clamp<int64_t>(1024 / G, 1, 64);
  thread_local std::vector<AttentionItem> items;  // reused: no allocation per step once grown
  items.clear();
  auto as_prefill = [&](const AttentionSpan& sp) { return sp.n >= 2 && sp.n * G >= 16 && !sp.rowwise; };
  int64_t decode_rows = 0;
  for (int64_t i = 0; i < n_spans; i++)
    if (as_prefill(spans[i]))
      for (int h = 0; h < s.n_kv_heads; h++)
        for (int64_t t0 = 0; t0 < spans[i].n; t0 += chunk)
          items.push_back({(int32_t)i, h, t0, std::min(spans[i].n, t0 + chunk), true, 0, G});
    else
      decode_rows += spans[i].n * s.n_kv_heads;
  const int64_t threads = pool().size();
  const int parts = decode_rows == 0 ? 1 : (int)std::clamp<int64_t>((threads + decode_rows - 1) / decode_rows, 1, G / 4 > 0 ? G / 4 : 1);
  for (int64_t i = 0; i < n_spans; i++)
    if (!as_prefill(spans[i]))
      for (int64_t t = 0; t < spans[i].n; t++)
        for (int h = 0; h < s.n_kv_heads; h++)
          for (int p = 0; p < parts; p++)
            items.push_back({(int32_t)i, h, t, t + 1, false, G * p / parts, G * (p + 1) / parts});
  const std::vector<AttentionItem>& work = items;
  // Names this call for the prefill scratch, which keeps a span's gathered keys between the chunks
  // one thread takes in a row (never across calls: another layer's pages, or the same buffers
  // after the cache moved on).
  static std::atomic<uint64_t> calls{0};
  const uint64_t call = ++calls;
  pool().parallel_for((int64_t)work.size(), 1, [&](int64_t b, int64_t e) {
    thread_local DecodeScratch decode;
    thread_local PrefillScratch scratch;
    for (int64_t it = b; it < e; it++) {
      const AttentionItem& w = work[(size_t)it];
      if (w.prefill)
        attend_prefill<V>(q, q_stride, spans[w.span], w.span, call, w.t0, w.t1, w.kv_head, s, kv, out, out_stride, scratch);
      else
        attend_decode<V>(q, q_stride, spans[w.span], w.t0, w.kv_head, w.g0, w.g1, s, kv, out, out_stride, decode);
    }
  });
}

}  // namespace kvad::kernels::detail
