#include "kernels/latent_attention.h"

#include "core/threads.h"
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
}  // namespace

void absorb_queries(const float* q, int64_t q_stride, int64_t n, const LatentShape& s, const float* kv_b, float* qa,
                    int64_t qa_stride, Isa isa) {
#if defined(__x86_64__)
  HeadLoop simd[] = {nullptr, latent_absorb_head_avx2, latent_absorb_head_avx512};
#else
  HeadLoop simd[] = {nullptr, nullptr, nullptr};
#endif
  each_head(simd[(int)isa] ? simd[(int)isa] : detail::absorb_head<ScalarLoops>, q, q_stride, n, s, kv_b, qa, qa_stride);
}

void expand_values(const float* u, int64_t u_stride, int64_t n, const LatentShape& s, const float* kv_b, float* out,
                   int64_t out_stride, Isa isa) {
#if defined(__x86_64__)
  HeadLoop simd[] = {nullptr, latent_expand_head_avx2, latent_expand_head_avx512};
#else
  HeadLoop simd[] = {nullptr, nullptr, nullptr};
#endif
  each_head(simd[(int)isa] ? simd[(int)isa] : detail::expand_head<ScalarLoops>, u, u_stride, n, s, kv_b, out, out_stride);
}

}  // namespace kvad::kernels
