#include <immintrin.h>

#include "kernels/attention_impl.h"
#include "kernels/latent_attention_impl.h"
#include "kernels/vexp.h"

namespace kvad::kernels {

namespace {
struct Avx2Vec {
  using reg = __m256;
  static constexpr int W = 8;
  // Query heads a dim_scores pass holds: 2 accumulators each, 8 of the 16 registers.
  static constexpr int kDimHeads = 4;
  static constexpr bool kPanels = true;
  static void gemm_panels(const float* a, const PackedWeight& w, int64_t rows, float* c, int64_t panel_k) {
    gemm_block_f32_avx2(a, w, 0, rows, 0, (w.m + 31) / 32, c, panel_k);
  }
  static __m256i mask(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n < 8 ? n : 8)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static reg zero() { return _mm256_setzero_ps(); }
  static reg set1(float x) { return _mm256_set1_ps(x); }
  static reg load(const float* p, int64_t n) { return n >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, mask(n)); }
  static void store(float* p, reg v, int64_t n) {
    if (n >= 8) _mm256_storeu_ps(p, v);
    else _mm256_maskstore_ps(p, mask(n), v);
  }
  static reg fmadd(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
  // The first n <= 8 keys of one dimension, widened in the register (keys by dimension).
  static reg load(const uint16_t* bf16, int64_t n) {
    alignas(16) uint16_t part[8] = {};
    if (n < 8) std::memcpy(part, bf16, (size_t)n * sizeof(uint16_t));
    const __m128i raw = _mm_loadu_si128((const __m128i*)(n < 8 ? part : bf16));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
  }
  static reg load(const int8_t* q, int64_t n) {
    alignas(8) int8_t part[8] = {};
    if (n < 8) std::memcpy(part, q, (size_t)n);
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)(n < 8 ? part : q))));
  }
  static reg add(reg a, reg b) { return _mm256_add_ps(a, b); }
  static reg mul(reg a, reg b) { return _mm256_mul_ps(a, b); }
  static void softmax(float* x, int64_t n, float scale) {
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    __m256 sc = _mm256_set1_ps(scale), sub = _mm256_set1_ps(mx * scale), sum = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      __m256 e = vexp::exp(_mm256_fmsub_ps(_mm256_loadu_ps(x + i), sc, sub));
      sum = _mm256_add_ps(sum, e);
      _mm256_storeu_ps(x + i, e);
    }
    float s = 0;
    float tmp[8];
    _mm256_storeu_ps(tmp, sum);
    for (float t : tmp) s += t;
    for (; i < n; i++) s += (x[i] = std::exp(x[i] * scale - mx * scale));
    float inv = 1.0f / s;
    for (int64_t j = 0; j < n; j++) x[j] *= inv;
  }
  // out[j] = the sum of a[j]'s 8 lanes, j = 0..7 (horizontal adds within 128-bit lanes, then
  // the two lanes' partial sums added).
  static void row_sums(const __m256* a, float* out) {
    __m256 h0123 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
    __m256 h4567 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
    _mm256_storeu_ps(out, _mm256_add_ps(_mm256_permute2f128_ps(h0123, h4567, 0x20),
                                        _mm256_permute2f128_ps(h0123, h4567, 0x31)));
  }
  static float dot(const float* a, const float* b, int n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
      s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
      s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s0 = _mm256_add_ps(s0, s1);
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(s0), _mm256_extractf128_ps(s0, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    float s = _mm_cvtss_f32(r);
    for (; i < n; i++) s += a[i] * b[i];
    return s;
  }
  static void axpy(float* y, float a, const float* x, int n) {
    __m256 av = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * x[i];
  }
  static void widen_bf16(const uint16_t* s, float* d, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)(s + i))), 16);
      _mm256_storeu_ps(d + i, _mm256_castsi256_ps(w));
    }
    for (; i < n; i++) {  // not core's inline bf16_to_f32: no shared inline code in an ISA file
      uint32_t u = (uint32_t)s[i] << 16;
      std::memcpy(d + i, &u, sizeof u);
    }
  }
  static void dequant_q8(const int8_t* q, float scale, float* d, int n) {
    __m256 sc = _mm256_set1_ps(scale);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
      __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)(q + i))));
      _mm256_storeu_ps(d + i, _mm256_mul_ps(f, sc));
    }
    for (; i < n; i++) d[i] = scale * (float)q[i];
  }
};
}  // namespace

void attention_avx2(const float* q, int64_t q_stride, const AttentionSpan* spans, int64_t n_spans,
                      const AttentionShape& s, const KvPages& kv, float* out, int64_t out_stride) {
  detail::attention_paged_impl<Avx2Vec>(q, q_stride, spans, n_spans, s, kv, out, out_stride);
}

void latent_absorb_head_avx2(const float* q, int64_t q_stride, int64_t n, const LatentShape& s, const float* kv_b,
                             int h, float* qa, int64_t qa_stride) {
  detail::absorb_head<Avx2Vec>(q, q_stride, n, s, kv_b, h, qa, qa_stride);
}

void latent_expand_head_avx2(const float* u, int64_t u_stride, int64_t n, const LatentShape& s, const float* kv_b,
                             int h, float* out, int64_t out_stride) {
  detail::expand_head<Avx2Vec>(u, u_stride, n, s, kv_b, h, out, out_stride);
}

}  // namespace kvad::kernels
