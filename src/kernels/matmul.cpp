#include "kernels/matmul.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/dtype.h"
#include "core/rng.h"
#include "core/threads.h"

namespace kvad::kernels {

// Scalar reference: four partial sums so the compiler can keep them in registers.
template <typename Load>
static void rows_scalar(const float* x, int64_t n, int64_t k, int64_t m, int64_t rb, int64_t re, float* y, Load load) {
  for (int64_t t = 0; t < n; t++) {
    const float* xt = x + t * k;
    for (int64_t r = rb; r < re; r++) {
      float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      int64_t i = 0;
      for (; i + 4 <= k; i += 4) {
        s0 += xt[i] * load(r, i);
        s1 += xt[i + 1] * load(r, i + 1);
        s2 += xt[i + 2] * load(r, i + 2);
        s3 += xt[i + 3] * load(r, i + 3);
      }
      for (; i < k; i++) s0 += xt[i] * load(r, i);
      y[t * m + r] = (s0 + s1) + (s2 + s3);
    }
  }
}

void rows_f32_scalar(const float* x, int64_t n, int64_t k, const void* w, int64_t m, int64_t rb, int64_t re, float* y) {
  const float* W = static_cast<const float*>(w);
  rows_scalar(x, n, k, m, rb, re, y, [&](int64_t r, int64_t i) { return W[r * k + i]; });
}

void rows_bf16_scalar(const float* x, int64_t n, int64_t k, const void* w, int64_t m, int64_t rb, int64_t re, float* y) {
  const uint16_t* W = static_cast<const uint16_t*>(w);
  rows_scalar(x, n, k, m, rb, re, y, [&](int64_t r, int64_t i) { return bf16_to_f32(W[r * k + i]); });
}

#if defined(__x86_64__)
// The tiles against the AVX-512 kernel on a ragged product: 21 tokens (a part tile), 45 rows (a
// part tile of 32), 83 inputs (a part step, odd k). Both sum f32 products, in different orders.
static bool amx_bf16_rows_agree() {
  const int64_t n = 21, m = 45, k = 83;
  Rng rng(20261205);
  std::vector<float> x((size_t)(n * k)), tiles((size_t)(n * m)), vector((size_t)(n * m));
  std::vector<uint16_t> w((size_t)(m * k));
  for (float& v : x) v = (float)(rng.uniform() * 2 - 1);
  for (uint16_t& v : w) v = f32_to_bf16((float)(rng.uniform() * 2 - 1));
  (amx_emulated() ? rows_bf16_amx_emulated : rows_bf16_amx)(x.data(), n, k, w.data(), m, 0, m, tiles.data());
  rows_bf16_avx512(x.data(), n, k, w.data(), m, 0, m, vector.data());
  for (size_t i = 0; i < tiles.size(); i++)
    if (!(std::fabs(tiles[i] - vector[i]) <= 1e-5f * (1 + std::fabs(vector[i])))) return false;
  return true;
}
#endif

bool amx_bf16_rows_usable() {
#if defined(__x86_64__)
  if (!amx_allowed()) return false;  // checked first: the first-use check waits for an allowed call
  static const bool usable = amx_usable_for(cpu_features().amx_bf16, "bf16 weights'", amx_bf16_rows_agree);
  return usable;
#else
  return false;
#endif
}

RowsFn rows_kernel(WType wt, Isa isa, int64_t tokens) {
#if defined(__x86_64__)
  if (wt == WType::BF16 && isa == Isa::Avx512 && tokens >= kAmxBf16Tokens && amx_bf16_rows_usable())
    return amx_emulated() ? rows_bf16_amx_emulated : rows_bf16_amx;
  if (isa == Isa::Avx512) return wt == WType::F32 ? rows_f32_avx512 : rows_bf16_avx512;
  if (isa == Isa::Avx2) return wt == WType::F32 ? rows_f32_avx2 : rows_bf16_avx2;
#endif
  return wt == WType::F32 ? rows_f32_scalar : rows_bf16_scalar;
}

void matmul(const float* x, int64_t n, int64_t k, const void* w, WType wt, int64_t m, float* y, Isa isa) {
  RowsFn fn = rows_kernel(wt, isa, n);
  // Split the output rows: each thread streams its own part of W once, whatever n is.
  int64_t grain = 16;
  if (m * k < 32 * 1024) {  // too small to be worth waking the pool
    fn(x, n, k, w, m, 0, m, y);
    return;
  }
  pool().parallel_for(m, grain, [&](int64_t b, int64_t e) { fn(x, n, k, w, m, b, e, y); });
}

void matmul_nn_scalar(const float* x, int64_t n, int64_t k, const float* b, int64_t m, float* y) {
  for (int64_t t = 0; t < n; t++) {
    float* yt = y + t * m;
    std::fill(yt, yt + m, 0.0f);
    for (int64_t i = 0; i < k; i++) {
      const float xi = x[t * k + i];
      const float* bi = b + i * m;
      for (int64_t j = 0; j < m; j++) yt[j] += xi * bi[j];
    }
  }
}

void matmul_nn(const float* x, int64_t n, int64_t k, const float* b, int64_t m, float* y, Isa isa) {
#if defined(__x86_64__)
  if (isa == Isa::Avx512) return matmul_nn_avx512(x, n, k, b, m, y);
  if (isa == Isa::Avx2) return matmul_nn_avx2(x, n, k, b, m, y);
#endif
  (void)isa;
  matmul_nn_scalar(x, n, k, b, m, y);
}

void matmul_multi(const float* x, int64_t n, int64_t k, const void* const* w, const WType* wt, const int64_t* m,
                  float* const* y, int count, Isa isa) {
  const int64_t grain = 16;
  int64_t total = 0;  // in grains, so no thread's share starts mid-tile
  for (int i = 0; i < count; i++) total += (m[i] + grain - 1) / grain;
  pool().parallel_for(total, 1, [&](int64_t b, int64_t e) {
    int64_t base = 0;
    for (int i = 0; i < count && base < e; i++) {
      int64_t span = (m[i] + grain - 1) / grain;
      int64_t c0 = std::max(b, base) - base, c1 = std::min(e, base + span) - base;
      if (c0 < c1) rows_kernel(wt[i], isa, n)(x, n, k, w[i], m[i], c0 * grain, std::min(m[i], c1 * grain), y[i]);
      base += span;
    }
  });
}

}  // namespace kvad::kernels
