#include "kernels/latent_attention.h"

#include <vector>

#include "core/threads.h"
#include "kernels/gemm.h"
#include "kernels/latent_attention_impl.h"

namespace kvad::kernels {

// Defined beside each ISA's attention trait (attention_avx2.cpp, attention_avx512.cpp).
void latent_absorb_head_avx2(const float*, int64_t, int64_t, const LatentShape&, const float*, int, float*, int64_t);
void latent_absorb_head_avx512(const float*, int64_t, int64_t, const LatentShape&, const float*, int, float*, int64_t);
void latent_expand_head_avx2(const float*, int64_t, int64_t, const LatentShape&, const float*, int, float*, int64_t);
void latent_expand_head_avx512(const float*, int64_t, int64_t, const LatentShape&, const float*, int, float*, int64_t);

namespace {
struct ScalarLoops {
  static float dot(const float* a, const float* b, int n) {
    float s = 0;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
  }
  static void axpy(float* y, float a, const float* x, int n) {
    for (int i = 0; i < n; i++) y[i] += a * x[i];
  }
};

using HeadLoop = void (*)(const float*, int64_t, int64_t, const LatentShape&, const float*, int, float*, int64_t);

// One item per head, all rows inside it: a head's kv_b rows stay in cache across a prefill's rows.
void each_head(HeadLoop loop, const float* in, int64_t in_stride, int64_t n, const LatentShape& s, const float* kv_b,
               float* out, int64_t out_stride) {
  pool().parallel_for(s.n_heads, 1, [&](int64_t h0, int64_t h1) {
    for (int64_t h = h0; h < h1; h++) loop(in, in_stride, n, s, kv_b, (int)h, out, out_stride);
  });
}
// From this many rows (a prefill's), a head's absorb or expand is one matrix product against its
// rows of kv_b packed in panels (gemm.h), where a row at a time (an axpy per q_nope value, a dot
// per output) ran at a fraction of the FMA rate: 17% of a DeepSeek-V2-Lite-shaped prefill at 512
// tokens (docs/models.md). The head's inputs are gathered into rows and its outputs scattered back.
constexpr int64_t kGemmRows = 16;

// out_h [n, m] (row stride out_stride, from out) = in_h [n, k] (row stride in_stride, from in) W^T,
// W [m, k] = w[o * w_ld + i], or w[i * w_ld + o] when w_transposed.
void head_product(const float* in, int64_t in_stride, int64_t n, int64_t k, const float* w, int64_t w_ld,
                  bool w_transposed, int64_t m, float* out, int64_t out_stride, Isa isa) {
  thread_local std::vector<float> a, c, wt;
  a.resize((size_t)(n * k));
  c.resize((size_t)(n * m));
  wt.resize((size_t)(m * k));
  for (int64_t o = 0; o < m; o++)
    for (int64_t i = 0; i < k; i++) wt[(size_t)(o * k + i)] = w_transposed ? w[i * w_ld + o] : w[o * w_ld + i];
  for (int64_t t = 0; t < n; t++) std::copy_n(in + t * in_stride, k, a.data() + t * k);
  const PackedWeight packed = PackedWeight::pack_f32(wt.data(), m, k);
  gemm_packed(a.data(), n, packed, c.data(), isa);  // inside each_head's region: on this thread
  for (int64_t t = 0; t < n; t++) std::copy_n(c.data() + t * m, m, out + t * out_stride);
}
}  // namespace

void absorb_queries(const float* q, int64_t q_stride, int64_t n, const LatentShape& s, const float* kv_b, float* qa,
                    int64_t qa_stride, Isa isa) {
#if defined(__x86_64__)
  HeadLoop simd[] = {nullptr, latent_absorb_head_avx2, latent_absorb_head_avx512};
#else
  HeadLoop simd[] = {nullptr, nullptr, nullptr};
#endif
  if (n >= kGemmRows) {  // q_abs_h = q_nope_h W_UK_h: W = W_UK_h^T [kv_rank, nope]
    pool().parallel_for(s.n_heads, 1, [&](int64_t h0, int64_t h1) {
      for (int64_t h = h0; h < h1; h++) {
        const float* qh = q + h * s.query_width();
        float* y = qa + h * s.latent_width();
        head_product(qh, q_stride, n, s.nope_dim, detail::uk_rows(kv_b, s, (int)h), s.kv_rank, true, s.kv_rank, y,
                     qa_stride, isa);
        for (int64_t t = 0; t < n; t++) std::copy_n(qh + t * q_stride + s.nope_dim, s.rope_dim, y + t * qa_stride + s.kv_rank);
      }
    });
    return;
  }
  each_head(simd[(int)isa] ? simd[(int)isa] : detail::absorb_head<ScalarLoops>, q, q_stride, n, s, kv_b, qa, qa_stride);
}

void expand_values(const float* u, int64_t u_stride, int64_t n, const LatentShape& s, const float* kv_b, float* out,
                   int64_t out_stride, Isa isa) {
#if defined(__x86_64__)
  HeadLoop simd[] = {nullptr, latent_expand_head_avx2, latent_expand_head_avx512};
#else
  HeadLoop simd[] = {nullptr, nullptr, nullptr};
#endif
  if (n >= kGemmRows) {  // out_h = W_UV_h u_h: W = W_UV_h [v, kv_rank] as stored
    pool().parallel_for(s.n_heads, 1, [&](int64_t h0, int64_t h1) {
      for (int64_t h = h0; h < h1; h++)
        head_product(u + h * s.kv_rank, u_stride, n, s.kv_rank, detail::uv_rows(kv_b, s, (int)h), s.kv_rank, false,
                     s.v_dim, out + h * s.v_dim, out_stride, isa);
    });
    return;
  }
  each_head(simd[(int)isa] ? simd[(int)isa] : detail::expand_head<ScalarLoops>, u, u_stride, n, s, kv_b, out, out_stride);
}

}  // namespace kvad::kernels
