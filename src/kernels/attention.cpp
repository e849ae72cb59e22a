#include "kernels/attention.h"

#include "kernels/attention_impl.h"

namespace kvad::kernels {

void attention_avx512(const float*, int64_t, int64_t, const AttentionShape&, const float*, const float*, int64_t,
                      float*);
void attention_avx2(const float*, int64_t, int64_t, const AttentionShape&, const float*, const float*, int64_t,
                    float*);

namespace {
struct ScalarVec {
  using reg = float;
  static constexpr int W = 1;
  static reg zero() { return 0.0f; }
  static reg set1(float x) { return x; }
  static reg load(const float* p, int64_t) { return *p; }
  static void store(float* p, reg v, int64_t) { *p = v; }
  static reg fmadd(reg a, reg b, reg c) { return a * b + c; }
  static void softmax(float* x, int64_t n, float scale) {
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    float s = 0;
    for (int64_t i = 0; i < n; i++) s += (x[i] = std::exp((x[i] - mx) * scale));
    for (int64_t i = 0; i < n; i++) x[i] /= s;
  }
  static float dot(const float* a, const float* b, int n) {
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int i = 0;
    for (; i + 4 <= n; i += 4) {
      s0 += a[i] * b[i];
      s1 += a[i + 1] * b[i + 1];
      s2 += a[i + 2] * b[i + 2];
      s3 += a[i + 3] * b[i + 3];
    }
    for (; i < n; i++) s0 += a[i] * b[i];
    return (s0 + s1) + (s2 + s3);
  }
  static void axpy(float* y, float a, const float* x, int n) {
    for (int i = 0; i < n; i++) y[i] += a * x[i];
  }
};
}  // namespace

void attention(const float* q, int64_t n, int64_t pos0, const AttentionShape& s, const float* k, const float* v,
               int64_t head_stride, float* out, Isa isa) {
#if defined(__x86_64__)
  if (isa == Isa::Avx512) return attention_avx512(q, n, pos0, s, k, v, head_stride, out);
  if (isa == Isa::Avx2) return attention_avx2(q, n, pos0, s, k, v, head_stride, out);
#endif
  if (n * (s.n_heads / s.n_kv_heads) >= 16) return detail::attention_prefill_impl<ScalarVec>(q, n, pos0, s, k, v, head_stride, out);
  detail::attention_impl<ScalarVec>(q, n, pos0, s, k, v, head_stride, out);
}

}  // namespace kvad::kernels
