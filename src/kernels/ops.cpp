#include "kernels/ops.h"

#include <algorithm>

#include <cmath>

#include "core/dtype.h"
#include "core/threads.h"

namespace kvad::kernels {

void rmsnorm(const float* x, const float* w, float eps, int64_t n, float* out) {
  double ss = 0;  // double: the mean of squares over thousands of values loses bits in f32
  for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
  float scale = (float)(1.0 / std::sqrt(ss / (double)n + eps));
  for (int64_t i = 0; i < n; i++) out[i] = x[i] * scale * w[i];
}

void layernorm(const float* x, const float* w, const float* b, float eps, int64_t n, float* out) {
  double mean = 0;
  for (int64_t i = 0; i < n; i++) mean += x[i];
  mean /= (double)n;
  double var = 0;
  for (int64_t i = 0; i < n; i++) var += ((double)x[i] - mean) * ((double)x[i] - mean);
  var /= (double)n;
  float scale = (float)(1.0 / std::sqrt(var + eps));
  float m = (float)mean;
  for (int64_t i = 0; i < n; i++) out[i] = (x[i] - m) * scale * w[i] + b[i];
}

void softmax(float* x, int64_t n) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
  double sum = 0;
  for (int64_t i = 0; i < n; i++) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  float inv = (float)(1.0 / sum);
  for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

void softmax_scaled_avx512(float* x, int64_t n, float scale);
void softmax_scaled_avx2(float* x, int64_t n, float scale);

static void softmax_scaled_scalar(float* x, int64_t n, float scale) {
  for (int64_t i = 0; i < n; i++) x[i] *= scale;
  softmax(x, n);
}

void softmax_scaled(float* x, int64_t n, float scale, Isa isa) {
#if defined(__x86_64__)
  if (isa == Isa::Avx512) return softmax_scaled_avx512(x, n, scale);
  if (isa == Isa::Avx2) return softmax_scaled_avx2(x, n, scale);
#endif
  (void)isa;
  softmax_scaled_scalar(x, n, scale);
}

float softmax_numerators_bf16_avx512(const float* x, int64_t n, float scale, uint16_t* out, int64_t n_out);

float softmax_numerators_bf16(const float* x, int64_t n, float scale, uint16_t* out, int64_t n_out, Isa isa) {
#if defined(__x86_64__)
  if (bf16_products(isa)) return softmax_numerators_bf16_avx512(x, n, scale, out, n_out);
#endif
  (void)isa;
  float mx = -INFINITY, sum = 0;
  for (int64_t i = 0; i < n; i++) mx = std::max(mx, x[i]);
  for (int64_t i = 0; i < n_out; i++) {
    const float e = i < n ? std::exp(scale * (x[i] - mx)) : 0.0f;
    out[i] = f32_to_bf16(e);
    sum += e;
  }
  return sum;
}

void gelu_erf_mul_avx512(const float* value, const float* gate, float* out, int64_t n);
void gelu_erf_mul_avx2(const float* value, const float* gate, float* out, int64_t n);

void gelu_erf_mul(const float* value, const float* gate, float* out, int64_t n, Isa isa) {
#if defined(__x86_64__)
  if (isa == Isa::Avx512) return gelu_erf_mul_avx512(value, gate, out, n);
  if (isa == Isa::Avx2) return gelu_erf_mul_avx2(value, gate, out, n);
#endif
  (void)isa;
  for (int64_t i = 0; i < n; i++) {
    const float g = gate[i];
    out[i] = value[i] * (0.5f * g * (1.0f + std::erf(g * 0.70710678118654752f)));
  }
}

void channel_moments_avx512(const float* x, int64_t rows, int64_t c, const float* center, double* s1, double* s2);
void channel_affine_avx512(float* x, int64_t rows, int64_t c, const float* scale, const float* shift, bool silu);
void channel_moments_avx2(const float* x, int64_t rows, int64_t c, const float* center, double* s1, double* s2);
void channel_affine_avx2(float* x, int64_t rows, int64_t c, const float* scale, const float* shift, bool silu);

void channel_moments(const float* x, int64_t rows, int64_t c, const float* center, double* s1, double* s2, Isa isa) {
#if defined(__x86_64__)
  if (isa == Isa::Avx512) return channel_moments_avx512(x, rows, c, center, s1, s2);
  if (isa == Isa::Avx2) return channel_moments_avx2(x, rows, c, center, s1, s2);
#endif
  (void)isa;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t ch = 0; ch < c; ch++) {
      const double d = (double)x[r * c + ch] - center[ch];
      s1[ch] += d;
      s2[ch] += d * d;
    }
}

void channel_affine(float* x, int64_t rows, int64_t c, const float* scale, const float* shift, bool silu, Isa isa) {
#if defined(__x86_64__)
  if (isa == Isa::Avx512) return channel_affine_avx512(x, rows, c, scale, shift, silu);
  if (isa == Isa::Avx2) return channel_affine_avx2(x, rows, c, scale, shift, silu);
#endif
  (void)isa;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t ch = 0; ch < c; ch++) {
      const float v = x[r * c + ch] * scale[ch] + shift[ch];
      x[r * c + ch] = silu ? v / (1.0f + std::exp(-v)) : v;
    }
}


void rmsnorm_avx512(const float* x, const float* w, float eps, int64_t n, float* out);
void rmsnorm_avx2(const float* x, const float* w, float eps, int64_t n, float* out);

void rmsnorm_rows(const float* x, int64_t x_stride, const float* w, float eps, int64_t rows, int64_t n, float* out,
                  int64_t out_stride, Isa isa) {
#if defined(__x86_64__)
  auto fn = isa == Isa::Avx512 ? rmsnorm_avx512 : isa == Isa::Avx2 ? rmsnorm_avx2 : rmsnorm;
#else
  auto fn = rmsnorm;
#endif
  auto run = [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; r++) fn(x + r * x_stride, w, eps, n, out + r * out_stride);
  };
  if (rows * n < kPoolFrom) return run(0, rows);
  pool().parallel_for(rows, std::max<int64_t>(1, 4096 / n), run);
}

void silu_mul_avx512(float* gate, const float* up, int64_t n);
void silu_mul_avx2(float* gate, const float* up, int64_t n);
void gelu_tanh_avx512(float* x, int64_t n);
void gelu_tanh_avx2(float* x, int64_t n);

static void silu_mul_scalar(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

static void gelu_tanh_scalar(float* x, int64_t n) {
  const float c = 0.7978845608028654f;  // sqrt(2/pi)
  for (int64_t i = 0; i < n; i++) {
    float v = x[i];
    x[i] = 0.5f * v * (1.0f + std::tanh(c * (v + 0.044715f * v * v * v)));
  }
}

// Element-wise work split over the pool from kPoolFrom values.
template <typename F>
static void elementwise(int64_t n, F&& f) {
  if (n < kPoolFrom) return f(int64_t{0}, n);
  pool().parallel_for(n, 64, f);
}

void silu_mul(float* gate, const float* up, int64_t n, Isa isa) {
#if defined(__x86_64__)
  auto fn = isa == Isa::Avx512 ? silu_mul_avx512 : isa == Isa::Avx2 ? silu_mul_avx2 : silu_mul_scalar;
#else
  auto fn = silu_mul_scalar;
#endif
  elementwise(n, [&](int64_t b, int64_t e) { fn(gate + b, up + b, e - b); });
}

void gelu_tanh(float* x, int64_t n, Isa isa) {
#if defined(__x86_64__)
  auto fn = isa == Isa::Avx512 ? gelu_tanh_avx512 : isa == Isa::Avx2 ? gelu_tanh_avx2 : gelu_tanh_scalar;
#else
  auto fn = gelu_tanh_scalar;
#endif
  elementwise(n, [&](int64_t b, int64_t e) { fn(x + b, e - b); });
}

void add(float* y, const float* x, int64_t n) {
  elementwise(n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; i++) y[i] += x[i];
  });
}

void lowrank_add_avx512(float* y, const float* coef, const float* rows, int64_t r, int64_t n, int64_t stride);
void lowrank_add_avx2(float* y, const float* coef, const float* rows, int64_t r, int64_t n, int64_t stride);

static void lowrank_add_scalar(float* y, const float* coef, const float* rows, int64_t r, int64_t n, int64_t stride) {
  for (int64_t i = 0; i < n; i++) {
    float s = y[i];
    for (int64_t j = 0; j < r; j++) s += coef[j] * rows[j * stride + i];
    y[i] = s;
  }
}

void lowrank_add(float* y, const float* coef, const float* rows, int64_t r, int64_t n, int64_t stride, Isa isa) {
#if defined(__x86_64__)
  auto fn = isa == Isa::Avx512 ? lowrank_add_avx512 : isa == Isa::Avx2 ? lowrank_add_avx2 : lowrank_add_scalar;
#else
  auto fn = lowrank_add_scalar;
#endif
  fn(y, coef, rows, r, n, stride);
}

void lowrank_add_bf16_avx512(float* y, const float* coef, const uint16_t* rows, int64_t r, int64_t n, int64_t stride);
void lowrank_add_bf16_avx2(float* y, const float* coef, const uint16_t* rows, int64_t r, int64_t n, int64_t stride);

static void lowrank_add_bf16_scalar(float* y, const float* coef, const uint16_t* rows, int64_t r, int64_t n, int64_t stride) {
  for (int64_t i = 0; i < n; i++) {
    float s = y[i];
    for (int64_t j = 0; j < r; j++) s += coef[j] * bf16_to_f32(rows[j * stride + i]);
    y[i] = s;
  }
}

void lowrank_add_bf16(float* y, const float* coef, const uint16_t* rows, int64_t r, int64_t n, int64_t stride, Isa isa) {
#if defined(__x86_64__)
  auto fn = isa == Isa::Avx512 ? lowrank_add_bf16_avx512
            : isa == Isa::Avx2 ? lowrank_add_bf16_avx2
                               : lowrank_add_bf16_scalar;
#else
  auto fn = lowrank_add_bf16_scalar;
#endif
  fn(y, coef, rows, r, n, stride);
}

void add_bias(float* y, const float* b, int64_t n, int64_t m) {
  rows_on_pool(n, m, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; t++)
      for (int64_t i = 0; i < m; i++) y[t * m + i] += b[i];
  });
}

void rope_neox(float* x, int n_heads, int head_dim, const float* cos, const float* sin) {
  int half = head_dim / 2;
  for (int h = 0; h < n_heads; h++) {
    float* v = x + (int64_t)h * head_dim;
    for (int i = 0; i < half; i++) {
      float a = v[i], b = v[i + half];
      v[i] = a * cos[i] - b * sin[i];
      v[i + half] = b * cos[i] + a * sin[i];
    }
  }
}

void rope_pairs(float* x, int n_heads, int head_stride, int rot_dims, const float* cos, const float* sin) {
  for (int h = 0; h < n_heads; h++) {
    float* v = x + (int64_t)h * head_stride;
    for (int i = 0; i < rot_dims / 2; i++) {
      float a = v[2 * i], b = v[2 * i + 1];
      v[2 * i] = a * cos[i] - b * sin[i];
      v[2 * i + 1] = b * cos[i] + a * sin[i];
    }
  }
}

}  // namespace kvad::kernels
