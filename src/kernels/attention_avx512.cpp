#include <immintrin.h>

#include "kernels/attention_impl.h"
#include "kernels/latent_attention_impl.h"
#include "kernels/vexp.h"

namespace kvad::kernels {

namespace {
struct Avx512Vec {
  using reg = __m512;
  static constexpr int W = 16;
  // Query heads a dim_scores pass holds: 2 accumulators each, 16 of the 32 registers.
  static constexpr int kDimHeads = 8;
  // Prefill's products through gemm.h's packed panels: c[rows][w.m] = a[rows][w.k] x w^T on this
  // thread, panels panel_k deep (0: w.k).
  static constexpr bool kPanels = true;
  static void gemm_panels(const float* a, const PackedWeight& w, int64_t rows, float* c, int64_t panel_k) {
    gemm_block_f32_avx512(a, w, 0, rows, 0, (w.m + 31) / 32, c, panel_k);
  }
  static __mmask16 mask(int64_t n) { return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1); }
  static reg zero() { return _mm512_setzero_ps(); }
  static reg set1(float x) { return _mm512_set1_ps(x); }
  static reg load(const float* p, int64_t n) { return n >= 16 ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(mask(n), p); }
  static void store(float* p, reg v, int64_t n) {
    if (n >= 16) _mm512_storeu_ps(p, v);
    else _mm512_mask_storeu_ps(p, mask(n), v);
  }
  static reg fmadd(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
  // The first n <= 16 keys of one dimension, widened in the register (keys by dimension).
  static reg load(const uint16_t* bf16, int64_t n) {
    const __m256i raw = n >= 16 ? _mm256_loadu_si256((const __m256i*)bf16) : _mm256_maskz_loadu_epi16(mask(n), bf16);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
  }
  static reg load(const int8_t* q, int64_t n) {
    const __m128i raw = n >= 16 ? _mm_loadu_si128((const __m128i*)q) : _mm_maskz_loadu_epi8(mask(n), q);
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(raw));
  }
  static reg add(reg a, reg b) { return _mm512_add_ps(a, b); }
  static reg mul(reg a, reg b) { return _mm512_mul_ps(a, b); }
  // x[0..n) = softmax(x * scale)
  static void softmax(float* x, int64_t n, float scale) {
    __m512 mx = _mm512_set1_ps(-INFINITY), sc = _mm512_set1_ps(scale);
    for (int64_t i = 0; i < n; i += 16) mx = _mm512_mask_max_ps(mx, mask(n - i), mx, _mm512_maskz_loadu_ps(mask(n - i), x + i));
    __m512 sub = _mm512_set1_ps(_mm512_reduce_max_ps(mx) * scale), sum = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
      __mmask16 m = mask(n - i);
      __m512 e = vexp::exp(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(m, x + i), sc, sub));
      e = _mm512_maskz_mov_ps(m, e);
      sum = _mm512_add_ps(sum, e);
      _mm512_mask_storeu_ps(x + i, m, e);
    }
    __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
    for (int64_t i = 0; i < n; i += 16) {
      __mmask16 m = mask(n - i);
      _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), inv));
    }
  }
  // out[j] = the sum of a[j]'s 16 lanes, j = 0..15: pairs of registers, then of halves and
  // quarters of lanes, are folded together (45 instructions for 16 sums).
  static void row_sums(const __m512* a, float* out) {
    __m512 u[8];  // u[k]: lanes 0-1 half-sums of row i, lanes 2-3 of row i + 4 (i = 0..3, 8..11)
    #pragma GCC unroll 8
    for (int k = 0; k < 8; k++) {
      const int i = k < 4 ? k : k + 4;
      u[k] = _mm512_add_ps(_mm512_shuffle_f32x4(a[i], a[i + 4], _MM_SHUFFLE(1, 0, 1, 0)),
                           _mm512_shuffle_f32x4(a[i], a[i + 4], _MM_SHUFFLE(3, 2, 3, 2)));
    }
    __m512 v[4];  // v[k]: per 128-bit lane, elements 0 and 2 of u[2k]'s rows, 1 and 3 of u[2k+1]'s
    #pragma GCC unroll 4
    for (int k = 0; k < 4; k++)
      v[k] = _mm512_add_ps(_mm512_unpacklo_ps(u[2 * k], u[2 * k + 1]), _mm512_unpackhi_ps(u[2 * k], u[2 * k + 1]));
    __m512 w[2];  // w[k]: per lane, one partial sum of each of 4 rows (lanes 0-1: rows 8k..8k+3, 2-3: the next 4)
    #pragma GCC unroll 2
    for (int k = 0; k < 2; k++) {
      __m512d x = _mm512_castps_pd(v[2 * k]), y = _mm512_castps_pd(v[2 * k + 1]);
      w[k] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)), _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
    }
    _mm512_storeu_ps(out, _mm512_add_ps(_mm512_shuffle_f32x4(w[0], w[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                        _mm512_shuffle_f32x4(w[0], w[1], _MM_SHUFFLE(3, 1, 3, 1))));
  }
  static float dot(const float* a, const float* b, int n) {
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    int i = 0;
    for (; i + 32 <= n; i += 32) {
      s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
      s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
    }
    for (; i < n; i += 16) {
      __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
      s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), s0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
  }
  static void axpy(float* y, float a, const float* x, int n) {
    __m512 av = _mm512_set1_ps(a);
    for (int i = 0; i < n; i += 16) {
      __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
      __m512 yv = _mm512_maskz_loadu_ps(m, y + i);
      _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(m, x + i), yv));
    }
  }  static void widen_bf16(const uint16_t* s, float* d, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
      __m512i w = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(s + i))), 16);
      _mm512_storeu_ps(d + i, _mm512_castsi512_ps(w));
    }
    for (; i < n; i++) {  // not core's inline bf16_to_f32: no shared inline code in an ISA file
      uint32_t u = (uint32_t)s[i] << 16;
      std::memcpy(d + i, &u, sizeof u);
    }
  }
  static void dequant_q8(const int8_t* q, float scale, float* d, int n) {
    __m512 sc = _mm512_set1_ps(scale);
    int i = 0;
    for (; i + 16 <= n; i += 16) {
      __m512 f = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)(q + i))));
      _mm512_storeu_ps(d + i, _mm512_mul_ps(f, sc));
    }
    for (; i < n; i++) d[i] = scale * (float)q[i];
  }

};
}  // namespace

void attention_avx512(const float* q, int64_t q_stride, const AttentionSpan* spans, int64_t n_spans,
                      const AttentionShape& s, const KvPages& kv, float* out, int64_t out_stride) {
  detail::attention_paged_impl<Avx512Vec>(q, q_stride, spans, n_spans, s, kv, out, out_stride);
}

void latent_absorb_head_avx512(const float* q, int64_t q_stride, int64_t n, const LatentShape& s, const float* kv_b,
                             int h, float* qa, int64_t qa_stride) {
  detail::absorb_head<Avx512Vec>(q, q_stride, n, s, kv_b, h, qa, qa_stride);
}

void latent_expand_head_avx512(const float* u, int64_t u_stride, int64_t n, const LatentShape& s, const float* kv_b,
                             int h, float* out, int64_t out_stride) {
  detail::expand_head<Avx512Vec>(u, u_stride, n, s, kv_b, h, out, out_stride);
}

}  // namespace kvad::kernels
